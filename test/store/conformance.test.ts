import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';
import {
  describeStoreConformance,
  type ConformanceDatabase,
  type OpenedStore,
  type RawConnection,
} from './conformance.js';

function sqliteDatabase(): Promise<ConformanceDatabase> {
  const file = tempSqlitePath('conformance');
  return Promise.resolve({
    url: `sqlite:${file.path}`,
    connect(): Promise<RawConnection> {
      const db = new Database(file.path, { timeout: 15_000 });
      return Promise.resolve({
        query: (sql) =>
          Promise.resolve().then(() => {
            const statement = db.prepare(sql);
            if (statement.reader) return statement.all() as Record<string, unknown>[];
            statement.run();
            return [];
          }),
        close() {
          db.close();
          return Promise.resolve();
        },
      });
    },
    cleanup: () => Promise.resolve(file.cleanup()),
  });
}

async function postgresDatabase(): Promise<ConformanceDatabase> {
  const db = await createTestDatabase('conformance');
  return {
    url: db.url,
    async connect(): Promise<RawConnection> {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      return {
        query: async (sql) => (await client.query<Record<string, unknown>>(sql)).rows,
        close: () => client.end(),
      };
    },
    cleanup: () => db.drop(),
  };
}

function opener(createDatabase: () => Promise<ConformanceDatabase>): () => Promise<OpenedStore> {
  return async () => {
    const db = await createDatabase();
    const store = await openStore(db.url, { migrate: true });
    return {
      ...db,
      store,
      async cleanup() {
        await store.close();
        await db.cleanup();
      },
    };
  };
}

describeStoreConformance('sqlite', opener(sqliteDatabase), sqliteDatabase);
describeStoreConformance('postgres', opener(postgresDatabase), postgresDatabase);

describe('postgres: synchronous_commit', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (let job = cleanups.pop(); job !== undefined; job = cleanups.pop()) await job();
  });

  async function openWith(synchronousCommit: 'on' | 'off'): Promise<string[]> {
    const db = await createTestDatabase(`sync_commit_${synchronousCommit}`);
    cleanups.push(() => db.drop());
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const name = new URL(db.url).pathname.slice(1);
      await client.query(
        `ALTER DATABASE ${client.escapeIdentifier(name)} SET synchronous_commit = ${synchronousCommit}`,
      );
    } finally {
      await client.end();
    }
    const warnings: string[] = [];
    const store = await openStore(db.url, { migrate: true, warn: (message) => warnings.push(message) });
    cleanups.push(() => store.close());
    return warnings;
  }

  it('warns at open when synchronous_commit is off', async () => {
    const warnings = await openWith('off');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/synchronous_commit/);
  });

  it('does not warn when synchronous_commit is on', async () => {
    expect(await openWith('on')).toEqual([]);
  });
});
