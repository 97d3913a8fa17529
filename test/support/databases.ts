import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { inject } from 'vitest';

const keep = (): boolean => process.env.ONCELY_KEEP_TEST_DB === '1';

/** Lowercase, [a-z0-9_] only, short enough that the whole name fits in 63 bytes. */
function sanitize(label: string): string {
  const cleaned = label
    .toLowerCase()
    .replace(/[^a-z0-9_]+/g, '_')
    .replace(/^_+|_+$/g, '');
  return (cleaned || 'db').slice(0, 40);
}

/** The admin connection URL provided by the global setup. */
export function adminDatabaseUrl(): string {
  return inject('databaseUrl');
}

async function withAdmin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminDatabaseUrl() });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * Creates a fresh, empty database on the test server.
 *
 * @example
 * const db = await createTestDatabase('reserve');
 * afterAll(() => db.drop());
 */
export async function createTestDatabase(label: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `oncely_t_${sanitize(label)}_${randomBytes(5).toString('hex')}`;
  await withAdmin((client) => client.query(`CREATE DATABASE ${client.escapeIdentifier(name)}`));
  const parsed = new URL(adminDatabaseUrl());
  parsed.pathname = `/${name}`;
  const url = parsed.toString();
  let dropped = false;
  return {
    url,
    async drop() {
      if (dropped) return;
      dropped = true;
      if (keep()) {
        console.log(`[oncely tests] kept test database: ${url}`);
        return;
      }
      await withAdmin((client) =>
        client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(name)} WITH (FORCE)`),
      );
    },
  };
}

/**
 * A path for a SQLite file in a fresh temp directory.
 *
 * @example
 * const db = tempSqlitePath('reserve');
 * afterAll(() => db.cleanup());
 */
export function tempSqlitePath(label: string): { path: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), `oncely-t-${sanitize(label)}-`));
  const path = join(dir, 'oncely.db');
  return {
    path,
    cleanup() {
      if (keep()) {
        console.log(`[oncely tests] kept test SQLite file: ${path}`);
        return;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
