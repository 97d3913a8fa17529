import { existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname } from 'node:path';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { adminDatabaseUrl, createTestDatabase, tempSqlitePath } from './databases.js';

describe('test database support', () => {
  it('creates a fresh PostgreSQL database, connects to it and drops it', async () => {
    const db = await createTestDatabase('Smoke Test!');
    const name = new URL(db.url).pathname.slice(1);
    expect(name).toMatch(/^oncely_t_smoke_test_[0-9a-f]+$/);
    expect(name).not.toBe(new URL(adminDatabaseUrl()).pathname.slice(1));

    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const result = await client.query<{ one: number; db: string }>(
        'select 1 as one, current_database() as db',
      );
      expect(result.rows).toEqual([{ one: 1, db: name }]);
    } finally {
      await client.end();
    }

    await db.drop();
    if (process.env.ONCELY_KEEP_TEST_DB !== '1') {
      const admin = new pg.Client({ connectionString: adminDatabaseUrl() });
      await admin.connect();
      try {
        const left = await admin.query('select 1 from pg_database where datname = $1', [name]);
        expect(left.rowCount).toBe(0);
      } finally {
        await admin.end();
      }
    }
  });

  it('gives a SQLite path in a fresh, empty temp directory', () => {
    const a = tempSqlitePath('smoke');
    const b = tempSqlitePath('smoke');
    try {
      expect(basename(a.path)).toBe('oncely.db');
      expect(dirname(a.path).startsWith(tmpdir())).toBe(true);
      expect(dirname(a.path)).not.toBe(dirname(b.path));
      expect(readdirSync(dirname(a.path))).toEqual([]);
      expect(existsSync(a.path)).toBe(false);
    } finally {
      a.cleanup();
      b.cleanup();
    }
    if (process.env.ONCELY_KEEP_TEST_DB !== '1') {
      expect(existsSync(dirname(a.path))).toBe(false);
    }
  });
});
