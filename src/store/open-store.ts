import { resolve } from 'node:path';
import { OncelyError } from '../errors/index.js';
import type { Clock } from '../util/clock.js';
import { assertSchemaCurrent } from './migrations.js';
import type { GroupCommitSettings, PostgresTimeouts } from './postgres/index.js';
import type { SchemaState, Store } from './store.js';
import { loadOptional } from '../util/optional-package.js';

export const DEFAULT_DATABASE_URL = 'sqlite:.oncely/oncely.db';

export interface OpenStoreOptions {
  /**
   * `true`: apply any pending migrations (the embedded default does this for you).
   * `false`: refuse a schema this code does not know, with a message saying to run `oncely migrate`.
   */
  readonly migrate?: boolean;
  readonly warn?: (message: string) => void;
  /**
   * PostgreSQL only: statement, lock and idle-in-transaction timeouts for every connection. The
   * environment overrides the defaults where these are not given: `ONCELY_PG_STATEMENT_TIMEOUT_MS`,
   * `ONCELY_PG_LOCK_TIMEOUT_MS`, `ONCELY_PG_IDLE_IN_TRANSACTION_TIMEOUT_MS` (0 turns one off).
   */
  readonly postgresTimeouts?: PostgresTimeouts;
  /**
   * PostgreSQL only: the group commit of run steps' writes across runs (`false`: each alone). The
   * environment's `ONCELY_PG_GROUP_COMMIT` (`off` or `<maxGroup>x<maxInFlight>`) applies where this
   * is not given; the default is 16 writes a statement, 2 statements of each kind in flight.
   */
  readonly groupCommit?: GroupCommitSettings | false;
  /**
   * PostgreSQL only: the connections of each of the store's two pools (the hot statements', the
   * others'), default 10; else the environment's `ONCELY_PG_POOL_SIZE`. A server with few cores
   * serves several workers best with few connections each (docs/operations.md).
   */
  readonly postgresPoolSize?: number;
  /**
   * SQLite only: create the database when there is none at the path (default true, so an embedded
   * ledger is one line). A deployment whose database must already exist passes `false` (every
   * `oncely` command that opens a user's database does, unless given `--create`): a missing file, or
   * one without an oncely schema, is refused with `STORE_NOT_FOUND` instead of starting over on an
   * empty ledger.
   */
  readonly create?: boolean;
  /**
   * The store's clock; default the machine's. SQLite: the clock of every time the store writes
   * (timestamps, lease, slot and heartbeat expiries) and of its lock waits. PostgreSQL keeps the
   * times it writes in SQL (`oncely_now()`, the server's); this clock times only its pauses before
   * repeating a statement. A runtime on this store should be given the same clock.
   */
  readonly clock?: Clock;
}

/**
 * Opens the store a URL names: `sqlite:PATH` (a file, created if missing unless `create: false`) or
 * `postgres://…`.
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
    // Reading the schema needs no lock; only a schema that needs migrating takes the write lock.
    const state = await store.schemaState();
    if (options.create === false) assertLedgerExists(store, url, state);
    if (state.state === 'outdated' && (options.migrate ?? store.dialect === 'sqlite')) await store.migrate();
    else assertSchemaCurrent(state);
    return store;
  } catch (error) {
    await store.close();
    throw error;
  }
}

/**
 * Refuses a SQLite file that holds no oncely schema (`STORE_NOT_FOUND`) where a missing database is
 * not to be created: such a file is not a ledger to go on with, and making one in it would start over.
 */
export function assertLedgerExists(store: Store, url: string, state: SchemaState): void {
  if (store.dialect !== 'sqlite' || state.version !== 0) return;
  throw new OncelyError(
    'STORE_NOT_FOUND',
    `${url} holds no oncely ledger; if this is the first run, create it with ` +
      `\`oncely migrate --create --database-url ${url}\` (\`serve\`, \`worker\` and \`keys create\` also ` +
      'take --create), otherwise restore it from a backup (starting over would forget calls that took effect)',
  );
}

/** Connects without touching or checking the schema (for `oncely migrate`). Prefer `openStore`. */
export async function connectStore(
  url: string,
  options: Pick<
    OpenStoreOptions,
    'warn' | 'postgresTimeouts' | 'create' | 'groupCommit' | 'postgresPoolSize' | 'clock'
  > = {},
): Promise<Store> {
  if (url.startsWith('sqlite:')) {
    const path = url.slice('sqlite:'.length).replace(/^\/\/(?=\/)/, '');
    if (path === '') throw invalidUrl(url);
    const lockWaitMs = msFromEnv(process.env, SQLITE_LOCK_WAIT_ENV);
    // Each driver is loaded when a URL of its kind is opened: importing oncely loads neither.
    const { SqliteStore } = await import('./sqlite/index.js');
    return SqliteStore.open(path === ':memory:' ? path : resolve(path), {
      ...(options.create === undefined ? {} : { create: options.create }),
      ...(lockWaitMs === undefined ? {} : { lockWaitMs }),
      ...(options.clock === undefined ? {} : { clock: options.clock }),
    });
  }
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) {
    // pg is an optional peer dependency: named with its install command when it is missing.
    await loadOptional({ name: 'pg', neededBy: 'a PostgreSQL ledger (postgres://…)' }, () => import('pg'));
    const { PostgresStore } = await import('./postgres/index.js');
    const groupCommit = options.groupCommit ?? groupCommitFromEnv(process.env);
    const poolSize = options.postgresPoolSize ?? poolSizeFromEnv(process.env);
    return PostgresStore.open(url, {
      ...(options.warn === undefined ? {} : { warn: options.warn }),
      ...(groupCommit === undefined ? {} : { groupCommit }),
      ...(poolSize === undefined ? {} : { maxConnections: poolSize }),
      ...(options.clock === undefined ? {} : { clock: options.clock }),
      timeouts: { ...timeoutsFromEnv(process.env), ...options.postgresTimeouts },
    });
  }
  throw invalidUrl(url);
}

const TIMEOUT_ENV = {
  statementMs: 'ONCELY_PG_STATEMENT_TIMEOUT_MS',
  lockMs: 'ONCELY_PG_LOCK_TIMEOUT_MS',
  idleInTransactionMs: 'ONCELY_PG_IDLE_IN_TRANSACTION_TIMEOUT_MS',
} as const;

/** How long a SQLite write waits for another process's lock (default 15000 ms; 0: not at all). */
const SQLITE_LOCK_WAIT_ENV = 'ONCELY_SQLITE_LOCK_WAIT_MS';

/** The PostgreSQL timeouts the environment sets; a value that is not a whole number of ms is refused. */
/**
 * `ONCELY_PG_GROUP_COMMIT`: `off` sends each step write alone; `<maxGroup>x<maxInFlight>` (e.g.
 * `16x2`, the default) sets the group commit's bounds; unset or blank: the default.
 */
export function groupCommitFromEnv(env: NodeJS.ProcessEnv): GroupCommitSettings | false | undefined {
  const raw = env.ONCELY_PG_GROUP_COMMIT?.trim();
  if (raw === undefined || raw === '') return undefined;
  if (raw === 'off') return false;
  const match = /^(\d{1,3})x(\d{1,2})$/.exec(raw);
  const [maxGroup, maxInFlight] = [Number(match?.[1]), Number(match?.[2])];
  if (match === null || maxGroup < 1 || maxGroup > 64 || maxInFlight < 1) {
    throw new OncelyError(
      'CONFIG_INVALID',
      `ONCELY_PG_GROUP_COMMIT=${JSON.stringify(raw)} is not a group commit setting: use off, or ` +
        '<maxGroup>x<maxInFlight> such as 16x2 (a group of 1 to 64 writes, at least 1 statement in flight)',
    );
  }
  return { maxGroup, maxInFlight };
}

/** `ONCELY_PG_POOL_SIZE`: connections per pool, 1 to 1000; unset or blank: the default (10). */
export function poolSizeFromEnv(env: NodeJS.ProcessEnv): number | undefined {
  const raw = env.ONCELY_PG_POOL_SIZE?.trim();
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1 || value > 1000) {
    throw new OncelyError(
      'CONFIG_INVALID',
      `ONCELY_PG_POOL_SIZE=${JSON.stringify(raw)} is not a pool size: use a whole number of connections from 1 to 1000`,
    );
  }
  return value;
}

export function timeoutsFromEnv(env: NodeJS.ProcessEnv): PostgresTimeouts {
  const timeouts: { statementMs?: number; lockMs?: number; idleInTransactionMs?: number } = {};
  for (const [field, name] of Object.entries(TIMEOUT_ENV) as [keyof PostgresTimeouts, string][]) {
    const value = msFromEnv(env, name);
    if (value !== undefined) timeouts[field] = value;
  }
  return timeouts;
}

/** A whole number of milliseconds (0 to one day) from the environment; unset or blank: undefined. */
export function msFromEnv(env: NodeJS.ProcessEnv, name: string): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 0 || value > 86_400_000) {
    throw new OncelyError(
      'CONFIG_INVALID',
      `${name}=${JSON.stringify(raw)} is not a timeout: use a whole number of milliseconds (0 turns it off)`,
    );
  }
  return value;
}

function invalidUrl(url: string): OncelyError {
  return new OncelyError(
    'STORE_URL_INVALID',
    `database URL ${JSON.stringify(url.replace(/:[^:@/]*@/, ':***@'))} is not supported; ` +
      'use sqlite:PATH (e.g. sqlite:.oncely/oncely.db) or postgres://user@host:5432/db',
  );
}
