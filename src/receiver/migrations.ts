import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { OncelyError } from '../errors/index.js';

/*
 * The key store's own schema: numbered `.sql` files per dialect beside its code, their versions in
 * its own table (`oncely_receiver_migrations`), so it can share a database with oncely's store or
 * anything else without either's migrations touching the other's.
 */

export const RECEIVER_MIGRATIONS_TABLE = 'oncely_receiver_migrations';

export interface ReceiverMigration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

const FILE_PATTERN = /^(\d{4})_([a-z0-9_]+)\.sql$/;

export function receiverMigrations(dialect: 'sqlite' | 'postgres'): ReceiverMigration[] {
  const dir = fileURLToPath(new URL(`./${dialect}/migrations/`, import.meta.url));
  return readdirSync(dir)
    .map((file) => ({ file, match: FILE_PATTERN.exec(file) }))
    .filter((f): f is { file: string; match: RegExpExecArray } => f.match !== null)
    .map(({ file, match }) => ({
      version: Number(match[1]),
      name: match[2] ?? file,
      sql: readFileSync(`${dir}${file}`, 'utf8'),
    }))
    .sort((a, b) => a.version - b.version);
}

/** Refuses a key store whose schema is newer than this code, or older when it may not migrate. */
export function assertReceiverSchema(applied: number, latest: number, where: string): void {
  if (applied > latest) {
    throw new OncelyError(
      'SCHEMA_TOO_NEW',
      `the idempotency key store at ${where} is at schema version ${applied}, newer than this oncely knows (${latest}); upgrade oncely`,
      { details: { version: applied, latest } },
    );
  }
  if (applied < latest) {
    throw new OncelyError(
      'SCHEMA_OUTDATED',
      `the idempotency key store at ${where} is at schema version ${applied}, this oncely needs ${latest}; open it with migrate: true`,
      { details: { version: applied, latest } },
    );
  }
}
