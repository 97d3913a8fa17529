import { resolve } from 'node:path';
import { OncelyError } from '../errors/index.js';
import { realClock, type Clock } from '../util/clock.js';
import { loadOptional } from '../util/optional-package.js';
import { DEFAULT_KEEP_FOR_MS, assertKeepFor, type KeyStore } from './key-store.js';

export interface OpenKeyStoreOptions {
  /** How long a completed or failed key is kept; default 7 days. */
  readonly keepForMs?: number;
  /** Apply the key store's migrations (its own table, `oncely_receiver_keys`); default true. */
  readonly migrate?: boolean;
  /** SQLite only: the clock of the times it writes; default the machine's. */
  readonly clock?: Clock;
}

/**
 * Opens the idempotency key store a URL names: `sqlite:PATH` (a file, created with its folder if
 * missing) or `postgres://…`. Each driver is loaded only when a URL of its kind is opened.
 *
 * @example
 * const keys = await openKeyStore('sqlite:.oncely/keys.db');
 * const begun = await keys.begin({ key: 'run_1:call_1', fingerprint: digest });
 */
export async function openKeyStore(url: string, options: OpenKeyStoreOptions = {}): Promise<KeyStore> {
  const keepForMs = options.keepForMs ?? DEFAULT_KEEP_FOR_MS;
  assertKeepFor(keepForMs);
  const migrate = options.migrate ?? true;
  if (url.startsWith('sqlite:')) {
    const path = url.slice('sqlite:'.length).replace(/^\/\/(?=\/)/, '');
    if (path === '') throw invalidUrl(url);
    const { SqliteKeyStore } = await import('./sqlite/sqlite-key-store.js');
    return SqliteKeyStore.open(path === ':memory:' ? path : resolve(path), {
      keepForMs,
      migrate,
      clock: options.clock ?? realClock,
    });
  }
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    // pg is an optional peer dependency: named with its install command when it is missing.
    await loadOptional({ name: 'pg', neededBy: 'a PostgreSQL key store (postgres://…)' }, () => import('pg'));
    const { PostgresKeyStore } = await import('./postgres/postgres-key-store.js');
    return PostgresKeyStore.open(url, { keepForMs, migrate });
  }
  throw invalidUrl(url);
}

function invalidUrl(url: string): OncelyError {
  return new OncelyError(
    'STORE_URL_INVALID',
    `key store URL ${JSON.stringify(url.replace(/:[^:@/]*@/, ':***@'))} is not supported; ` +
      'use sqlite:PATH (e.g. sqlite:.oncely/keys.db) or postgres://user@host:5432/db',
  );
}
