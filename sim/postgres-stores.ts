import pg from 'pg';
import type { Store } from '../src/store/index.js';
import { PostgresStore } from '../src/store/postgres/index.js';
import type { Clock } from '../src/util/clock.js';
import { KeptStores } from './stores.js';

/*
 * The PostgreSQL leg: every process's store a `PostgresStore` (its own two pools) over one database
 * that is the simulator's alone. PostgreSQL keeps the times it writes in SQL: in this database
 * `oncely_now()` — and `now()` and `statement_timestamp()`, which a few statements use (the
 * database's search_path puts `public` before `pg_catalog`, so these shadow the built-ins) — read
 * the virtual time from a one-row table, which the simulator sets before every store call it lets
 * through. Leases, slots, deadlines and wake-ups therefore follow the virtual clock. Between
 * schedules one TRUNCATE of every table empties the ledger and restarts its id sequences: each
 * schedule starts on new, empty tables, so even a read without ORDER BY finds rows where a fresh
 * database would have them. The database commits with `synchronous_commit = off` (twice the
 * schedules a minute): what a server crash could lose is not simulated, and what a commit shows
 * other connections is the same. (The stores' warning about it is therefore not shown.)
 */

const VIRTUAL_TIME = `
CREATE TABLE oncely_sim_clock (t timestamptz NOT NULL);
INSERT INTO oncely_sim_clock VALUES (to_timestamp(0));
CREATE OR REPLACE FUNCTION oncely_now() RETURNS timestamptz LANGUAGE sql VOLATILE AS
  $$ SELECT t FROM public.oncely_sim_clock $$;
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE sql STABLE AS
  $$ SELECT t FROM public.oncely_sim_clock $$;
CREATE FUNCTION public.statement_timestamp() RETURNS timestamptz LANGUAGE sql STABLE AS
  $$ SELECT t FROM public.oncely_sim_clock $$;
DO $$ BEGIN
  EXECUTE format('ALTER DATABASE %I SET search_path = public, pg_catalog', current_database());
  EXECUTE format('ALTER DATABASE %I SET synchronous_commit = off', current_database());
END $$;`;

const SET_TIME = `UPDATE oncely_sim_clock SET t = to_timestamp(0) + $1::bigint * interval '1 millisecond'`;

/** Connections of each of a store's two pools: its calls come one at a time. */
const POOL_SIZE = 3;

interface Pools {
  readonly pool: pg.Pool & { _clients?: pg.Client[] };
  readonly hotPool: pg.Pool & { _clients?: pg.Client[] };
}
const poolsOf = (store: Store): Pools => store as unknown as Pools;

/**
 * What the system does for a killed process: its connections are cut (the server rolls back an open
 * transaction and lets its locks go), whatever it was doing. `close()` would wait for the work in
 * flight, which a dead process never finishes.
 */
export function severPostgres(store: Store): void {
  const { pool, hotPool } = poolsOf(store);
  for (const p of [pool, hotPool]) {
    for (const client of p._clients ?? []) {
      (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
    }
  }
  // Stops its schema watch; the pools' end waits on clients a dead process never gives back.
  void store.close().catch(() => undefined);
}

/** One database for every schedule (`url`, made for the simulator alone), its stores kept. */
export class PostgresPool extends KeptStores {
  readonly realIo = true;
  #synced: number | undefined;

  private constructor(
    readonly url: string,
    private readonly admin: pg.Client,
    private readonly truncate: string,
  ) {
    super();
  }

  /** Migrates the empty database at `url` and makes its SQL time the simulator's. */
  static async create(url: string): Promise<PostgresPool> {
    const migrator = await PostgresStore.open(url);
    try {
      await migrator.migrate();
    } finally {
      await migrator.close();
    }
    const setup = new pg.Client({ connectionString: url });
    await setup.connect();
    let tables: string[];
    try {
      await setup.query(VIRTUAL_TIME);
      const { rows } = await setup.query<{ name: string }>(
        `SELECT quote_ident(tablename) AS name FROM pg_tables WHERE schemaname = 'public'
           AND tablename NOT IN ('schema_migrations', 'oncely_sim_clock') ORDER BY tablename`,
      );
      tables = rows.map((r) => r.name);
      // A vacuum running by itself mid-schedule could move rows, and an unordered read's order with them.
      for (const table of tables) await setup.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
    } finally {
      await setup.end();
    }
    // Connected after the search_path was set on the database.
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    return new PostgresPool(url, admin, `TRUNCATE ${tables.join(', ')} RESTART IDENTITY`);
  }

  async reset(): Promise<void> {
    await this.admin.query(this.truncate);
  }

  async sync(nowMs: number): Promise<void> {
    if (nowMs === this.#synced) return;
    await this.admin.query(SET_TIME, [nowMs]);
    this.#synced = nowMs;
  }

  sever(store: Store): void {
    severPostgres(store);
  }

  protected openNew(clock: Clock): Promise<Store> {
    return PostgresStore.open(this.url, { clock, maxConnections: POOL_SIZE, warn: () => undefined });
  }

  protected openObserver(): Promise<Store> {
    return PostgresStore.open(this.url, { maxConnections: POOL_SIZE, warn: () => undefined });
  }

  protected reusable(store: Store): boolean {
    const { pool, hotPool } = poolsOf(store);
    return [pool, hotPool].every((p) => p.totalCount === p.idleCount && p.waitingCount === 0);
  }

  protected async closeDatabase(): Promise<void> {
    await this.admin.end();
  }
}

/**
 * A database of the simulator's own on the server `adminUrl` names: `oncely_sim_<pid>`, dropped by
 * `drop()`. Those a run killed before it could drop them (their process is gone) are dropped first.
 */
export async function simDatabase(adminUrl: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `oncely_sim_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ datname: string }>(
      `SELECT datname FROM pg_database WHERE datname ~ '^oncely_sim_[0-9]+$'`,
    );
    for (const { datname } of rows) {
      if (datname === name || !alive(Number(datname.slice('oncely_sim_'.length)))) {
        await admin.query(`DROP DATABASE IF EXISTS ${admin.escapeIdentifier(datname)} WITH (FORCE)`);
      }
    }
    await admin.query(`CREATE DATABASE ${admin.escapeIdentifier(name)}`);
  } finally {
    await admin.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: adminUrl });
      await client.connect();
      try {
        await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(name)} WITH (FORCE)`);
      } finally {
        await client.end();
      }
    },
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as { code?: string }).code === 'EPERM';
  }
}
