import { resolve } from 'node:path';
import { OncelyError } from '../errors/index.js';
import { assertSchemaCurrent } from './migrations.js';
import { PostgresStore } from './postgres/index.js';
import { SqliteStore } from './sqlite/index.js';
import type { Store } from './store.js';

export const DEFAULT_DATABASE_URL = 'sqlite:.oncely/oncely.db';

export interface OpenStoreOptions {
  /**
   * `true`: apply any pending migrations (the embedded default does this for you).
   * `false`: refuse a schema this code does not know, with a message saying to run `oncely migrate`.
   */
  readonly migrate?: boolean;
  readonly warn?: (message: string) => void;
}

/**
 * Opens the store a URL names: `sqlite:PATH` (a file, created if missing) or `postgres://…`.
 *
 * @example
 * const store = await openStore('sqlite:.oncely/oncely.db', { migrate: true });
 */
export async function openStore(
  url: string = DEFAULT_DATABASE_URL,
  options: OpenStoreOptions = {},
): Promise<Store> {
  const store = await connectStore(url, options);
  try {
    if (options.migrate ?? store.dialect === 'sqlite') await store.migrate();
    else assertSchemaCurrent(await store.schemaState());
    return store;
  } catch (error) {
    await store.close();
    throw error;
  }
}

/** Connects without touching or checking the schema (for `oncely migrate`). Prefer `openStore`. */
export async function connectStore(
  url: string,
  options: Pick<OpenStoreOptions, 'warn'> = {},
): Promise<Store> {
  if (url.startsWith('sqlite:')) {
    const path = url.slice('sqlite:'.length).replace(/^\/\/(?=\/)/, '');
    if (path === '') throw invalidUrl(url);
    return SqliteStore.open(path === ':memory:' ? path : resolve(path));
  }
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    return PostgresStore.open(url, options.warn === undefined ? {} : { warn: options.warn });
  }
  throw invalidUrl(url);
}

function invalidUrl(url: string): OncelyError {
  return new OncelyError(
    'STORE_URL_INVALID',
    `database URL ${JSON.stringify(url.replace(/:[^:@/]*@/, ':***@'))} is not supported; ` +
      'use sqlite:PATH (e.g. sqlite:.oncely/oncely.db) or postgres://user@host:5432/db',
  );
}
