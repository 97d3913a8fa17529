import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { OncelyError } from '../errors/index.js';
import type { SchemaState, StoreDialect } from './store.js';

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly sql: string;
}

const FILE_PATTERN = /^(\d{4})_([a-z0-9_]+)\.sql$/;

/** The numbered `.sql` files of one dialect, in order. Numbers must run 1, 2, 3… without gaps. */
export function loadMigrations(dialect: StoreDialect): Migration[] {
  const dir = fileURLToPath(new URL(`./${dialect}/migrations/`, import.meta.url));
  const migrations = readdirSync(dir)
    .map((file) => ({ file, match: FILE_PATTERN.exec(file) }))
    .filter((f): f is { file: string; match: RegExpExecArray } => f.match !== null)
    .map(({ file, match }) => ({
      version: Number(match[1]),
      name: match[2] ?? file,
      sql: readFileSync(`${dir}${file}`, 'utf8'),
    }))
    .sort((a, b) => a.version - b.version);
  migrations.forEach((m, i) => {
    if (m.version !== i + 1) {
      throw new OncelyError(
        'SCHEMA_MIGRATION_FAILED',
        `${dialect} migrations must be numbered 0001, 0002, … without gaps; found ${m.version} at position ${i + 1}`,
      );
    }
  });
  return migrations;
}

export function latestVersion(migrations: readonly Migration[]): number {
  return migrations.at(-1)?.version ?? 0;
}

export function schemaStateOf(applied: number, latest: number): SchemaState {
  if (applied === latest) return { state: 'current', version: applied };
  if (applied < latest) return { state: 'outdated', version: applied, latest };
  return { state: 'too-new', version: applied, latest };
}

export function tooNewError(version: number, latest: number): OncelyError {
  return new OncelyError(
    'SCHEMA_TOO_NEW',
    `the database schema is at version ${version}, newer than this oncely knows (${latest}); ` +
      `upgrade oncely before running it against this database`,
    { details: { version, latest } },
  );
}

/** Refuses to go on with a schema the code does not know: migrate first, or upgrade the code. */
export function assertSchemaCurrent(state: SchemaState): void {
  if (state.state === 'current') return;
  if (state.state === 'too-new') throw tooNewError(state.version, state.latest);
  throw new OncelyError(
    'SCHEMA_OUTDATED',
    `the database schema is at version ${state.version}, this oncely needs ${state.latest}; run \`oncely migrate\``,
    { details: { version: state.version, latest: state.latest } },
  );
}
