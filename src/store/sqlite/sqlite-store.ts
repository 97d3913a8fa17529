import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { OncelyError } from '../../errors/index.js';
import { latestVersion, loadMigrations, schemaStateOf, tooNewError } from '../migrations.js';
import type { ApiKeyStore } from '../api-key-store.js';
import type { MonitorStore } from '../monitor-store.js';
import type { RunStore } from '../run-store.js';
import type { LedgerStore, MigrationReport, SchemaState, Store, StoreTx } from '../store.js';
import { SqliteApiKeys } from './api-keys.js';
import { SqliteLedger } from './ledger.js';
import { SqliteMonitor } from './monitor.js';
import { SqliteRuns } from './runs.js';

const BUSY_TIMEOUT_MS = 15_000;

/**
 * The embedded store: one SQLite file in WAL mode with `synchronous=FULL`, so a committed record
 * survives SIGKILL and power loss. Several processes may share the file; writers take the lock with
 * `BEGIN IMMEDIATE` and wait for each other up to the busy timeout.
 */
export class SqliteStore implements Store {
  readonly dialect = 'sqlite' as const;
  readonly ledger: LedgerStore;
  readonly runs: RunStore;
  readonly apiKeys: ApiKeyStore;
  readonly monitor: MonitorStore;
  private readonly db: Database.Database;
  /** Serialises this connection's async transactions, so no other call interleaves with one. */
  private tail: Promise<unknown> = Promise.resolve();

  private constructor(db: Database.Database) {
    this.db = db;
    const ledger = new SqliteLedger(db);
    const runs = new SqliteRuns(db);
    this.tx = { ledger, runs };
    this.ledger = exclusive(ledger, (fn) => this.exclusive(fn));
    this.runs = exclusive(runs, (fn) => this.exclusive(fn));
    this.apiKeys = exclusive(new SqliteApiKeys(db), (fn) => this.exclusive(fn));
    this.monitor = exclusive(new SqliteMonitor(db), (fn) => this.exclusive(fn));
  }

  /** The unwrapped stores, used inside a transaction that already holds the connection. */
  private readonly tx: StoreTx;

  static open(path: string): SqliteStore {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    let db: Database.Database;
    try {
      db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
    } catch (cause) {
      throw new OncelyError(
        'STORE_UNAVAILABLE',
        `cannot open the SQLite database ${path}: ${String(cause)}`,
        {
          cause,
        },
      );
    }
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    db.pragma('foreign_keys = ON');
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    return new SqliteStore(db);
  }

  async transaction<T>(fn: (tx: StoreTx) => Promise<T>): Promise<T> {
    return this.exclusive(async () => {
      this.db.exec('BEGIN IMMEDIATE');
      try {
        const value = await fn(this.tx);
        this.db.exec('COMMIT');
        return value;
      } catch (error) {
        if (this.db.inTransaction) this.db.exec('ROLLBACK');
        throw error;
      }
    });
  }

  migrate(): Promise<MigrationReport> {
    const migrations = loadMigrations('sqlite');
    const latest = latestVersion(migrations);
    return this.exclusive(() => {
      const applied: string[] = [];
      // BEGIN IMMEDIATE takes the write lock first: a second process migrating waits, then sees our rows.
      this.db
        .transaction(() => {
          this.db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT`);
          const current = this.appliedVersion();
          if (current > latest) throw tooNewError(current, latest);
          for (const m of migrations.filter((m) => m.version > current)) {
            this.db
              .prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)')
              .run(m.version, m.name, new Date().toISOString());
            this.db.exec(m.sql);
            applied.push(`${String(m.version).padStart(4, '0')}_${m.name}`);
          }
        })
        .immediate();
      return Promise.resolve({ applied, version: latest });
    });
  }

  schemaState(): Promise<SchemaState> {
    const latest = latestVersion(loadMigrations('sqlite'));
    return this.exclusive(() => Promise.resolve(schemaStateOf(this.appliedVersion(), latest)));
  }

  close(): Promise<void> {
    return this.exclusive(() => {
      if (this.db.open) this.db.close();
      return Promise.resolve();
    });
  }

  private appliedVersion(): number {
    const table = this.db
      .prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`)
      .get();
    if (table === undefined) return 0;
    const row = this.db.prepare('SELECT MAX(version) AS v FROM schema_migrations').get() as {
      v: number | null;
    };
    return row.v ?? 0;
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.tail.then(fn, fn);
    this.tail = run.catch(() => undefined);
    return run;
  }
}

/** Wraps every method so it waits for any transaction this connection has open. */
function exclusive<S extends object>(target: S, run: <T>(fn: () => Promise<T>) => Promise<T>): S {
  return new Proxy(target, {
    get(object, property, receiver) {
      const value: unknown = Reflect.get(object, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) =>
        run(() => (value as (...a: unknown[]) => Promise<unknown>).apply(object, args));
    },
  });
}
