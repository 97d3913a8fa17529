import { existsSync, mkdirSync, statSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { OncelyError } from '../../errors/index.js';
import { latestVersion, loadMigrations, schemaStateOf, tooNewError } from '../migrations.js';
import type { ApiKeyStore } from '../api-key-store.js';
import type { LoopStepStore } from '../loop-step-store.js';
import type { WorkerStore } from '../worker-store.js';
import type { ToolSlotStore } from '../tool-slot-store.js';
import type { MonitorStore } from '../monitor-store.js';
import type { RunStore } from '../run-store.js';
import type { LedgerStore } from '../ledger-store.js';
import type { MigrationReport, SchemaState, Store, StoreTx } from '../store.js';
import { isWriteMethod, type StorePart } from '../write-methods.js';
import { SqliteApiKeys } from './api-keys.js';
import { SqliteLedger } from './ledger.js';
import { SqliteLoopSteps } from './loop-steps.js';
import { SqliteWorkflows } from './workflows.js';
import type { WorkflowStore } from '../workflow-store.js';
import { SqliteWorkers } from './workers.js';
import { SqliteToolSlots } from './tool-slots.js';
import {
  recordStepIn,
  reserveStepIn,
  type RecordStepRequest,
  type RecordStepResult,
  type ReserveStepRequest,
  type ReserveStepResult,
} from '../step-writes.js';
import { SqliteMonitor } from './monitor.js';
import { SqliteRuns } from './runs.js';
import { asStoreError, isBusy, lockedTooLong } from './sqlite-errors.js';
import { cacheStatements } from './statement-cache.js';
import { isoNow, realClock, type Clock } from '../../util/clock.js';

/** How long a write waits for another process's write lock (without blocking this process). */
export const DEFAULT_LOCK_WAIT_MS = 15_000;

/**
 * How often a running store looks whether the path still names the file it opened (a `stat`): at the
 * first operation this long after the last look. Readiness and any failed statement look at once.
 */
export const FILE_CHECK_MS = 1_000;

export interface SqliteStoreOptions {
  /**
   * Create the file (and its folder) when it is missing; default true. `false` refuses a missing
   * file with `STORE_NOT_FOUND`, so a deployment whose database was deleted does not start over on
   * an empty ledger (and pay again for calls the lost one recorded).
   */
  readonly create?: boolean;
  /** How long a write waits for another process's lock before `STORE_UNAVAILABLE`; default 15 s. */
  readonly lockWaitMs?: number;
  /**
   * The time of every timestamp, lease and slot expiry the store writes, and of its lock waits;
   * default the machine's (`realClock`). The simulator passes its virtual clock.
   */
  readonly clock?: Clock;
}

/** The file's identity when the store opened it: a different one at the path is another database. */
interface FileIdentity {
  readonly dev: number;
  readonly ino: number;
}

/**
 * The embedded store: one SQLite file in WAL mode with `synchronous=FULL`, so a committed record
 * survives SIGKILL and power loss. Several processes may share the file.
 *
 * Two connections: writes take the write lock with `BEGIN IMMEDIATE` on one, in turn; reads go to a
 * read-only one and never wait for the lock (WAL readers see the last commit). SQLite waits for a
 * lock by blocking the thread, so the store never lets it: the busy timeout is zero and a write
 * whose lock another process holds is tried again after a pause, up to `lockWaitMs`, while the
 * event loop goes on (health checks, lease renewals, other requests).
 *
 * The store checks the path still names the file it opened (a deleted or replaced file would
 * otherwise go on answering from the unlinked inode, and a restart would start an empty ledger): at
 * the first operation FILE_CHECK_MS or more after the last check, at every readiness probe, and
 * whenever a statement fails. From the check that sees it on, the store refuses everything with
 * `STORE_FILE_REPLACED`. The window this leaves: operations in the FILE_CHECK_MS after a check still
 * land in a file unlinked meanwhile, and are lost with it as everything else it held (a `stat`
 * before every operation closed that window, at a cost paid on every call).
 *
 * Every write transaction also reads the schema cookie under the write lock (one prepared statement):
 * a schema another process migrated past this code's refuses the write with `SCHEMA_TOO_NEW`.
 */
export class SqliteStore implements Store {
  readonly dialect = 'sqlite' as const;
  readonly ledger: LedgerStore;
  readonly runs: RunStore;
  readonly apiKeys: ApiKeyStore;
  readonly loopSteps: LoopStepStore;
  readonly workflows: WorkflowStore;
  readonly workers: WorkerStore;
  readonly toolSlots: ToolSlotStore;
  readonly monitor: MonitorStore;
  /** The unwrapped stores on the write connection, used inside a transaction that holds the lock. */
  private readonly tx: StoreTx;
  /** Serialises the write connection's transactions, so no other call interleaves with one. */
  private tail: Promise<unknown> = Promise.resolve();
  /** The schema cookie last seen under the write lock; a change means someone migrated. */
  private schemaCookie: number | undefined;
  private replaced: OncelyError | undefined;
  /** When (by the clock) the file was last checked. */
  private fileCheckedAt: number;
  private readonly begins: Database.Statement;
  private readonly commits: Database.Statement;
  private readonly rollbacks: Database.Statement;
  private readonly cookie: Database.Statement<[], { schema_version: number }>;

  private constructor(
    private readonly path: string,
    private readonly writer: Database.Database,
    /** The read connection; the write one for `:memory:`, whose reads then queue with the writes. */
    private readonly reader: Database.Database,
    private readonly identity: FileIdentity | undefined,
    private readonly lockWaitMs: number,
    readonly clock: Clock,
  ) {
    const ledger = new SqliteLedger(writer, clock);
    const runs = new SqliteRuns(writer, clock);
    const workflows = new SqliteWorkflows(writer, clock);
    this.tx = { ledger, runs, workflows };
    this.ledger = this.route('ledger', ledger, new SqliteLedger(reader, clock));
    this.runs = this.route('runs', runs, new SqliteRuns(reader, clock));
    this.apiKeys = this.route('apiKeys', new SqliteApiKeys(writer, clock), new SqliteApiKeys(reader, clock));
    this.loopSteps = this.route(
      'loopSteps',
      new SqliteLoopSteps(writer, clock),
      new SqliteLoopSteps(reader, clock),
    );
    this.workflows = this.route('workflows', workflows, new SqliteWorkflows(reader, clock));
    this.workers = this.route('workers', new SqliteWorkers(writer, clock), new SqliteWorkers(reader, clock));
    this.toolSlots = this.route(
      'toolSlots',
      new SqliteToolSlots(writer, clock),
      new SqliteToolSlots(reader, clock),
    );
    this.monitor = this.route('monitor', new SqliteMonitor(writer, clock), new SqliteMonitor(reader, clock));
    // Prepared once: `exec` and `pragma` compile their text again on every call.
    this.begins = writer.prepare('BEGIN IMMEDIATE');
    this.commits = writer.prepare('COMMIT');
    this.rollbacks = writer.prepare('ROLLBACK');
    this.cookie = writer.prepare('PRAGMA schema_version');
    this.fileCheckedAt = clock.now();
  }

  static async open(path: string, options: SqliteStoreOptions = {}): Promise<SqliteStore> {
    const lockWaitMs = options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS;
    const clock = options.clock ?? realClock;
    if (path === ':memory:') {
      const db = new Database(path);
      configure(db);
      cacheStatements(db);
      return new SqliteStore(path, db, db, undefined, lockWaitMs, clock);
    }
    if (!existsSync(path)) {
      if (options.create === false) throw notFound(path);
      try {
        mkdirSync(dirname(path), { recursive: true });
      } catch (cause) {
        throw new OncelyError('STORE_UNAVAILABLE', `cannot create the folder of ${path}: ${String(cause)}`, {
          cause,
        });
      }
    }
    const deadline = clock.now() + lockWaitMs;
    let writer: Database.Database | undefined;
    try {
      writer = new Database(path, { timeout: 0 });
      const db = writer;
      // Turning WAL on takes a lock when the file is not in WAL mode yet: wait for it, not block.
      await untilFree(clock, path, deadline, lockWaitMs, () => configure(db));
      cacheStatements(db);
      const identity = fileIdentity(path);
      if (identity === undefined) throw replacedError(path);
      const reader = new Database(path, { readonly: true, fileMustExist: true, timeout: 0 });
      reader.pragma('query_only = ON');
      cacheStatements(reader);
      return new SqliteStore(path, writer, reader, identity, lockWaitMs, clock);
    } catch (error) {
      if (writer?.open === true) writer.close();
      throw asOpenError(error, path);
    }
  }

  async transaction<T>(fn: (tx: StoreTx) => Promise<T>): Promise<T> {
    return this.write(() => fn(this.tx));
  }

  reserveStep(request: ReserveStepRequest): Promise<ReserveStepResult> {
    return this.transaction((tx) => reserveStepIn(tx, request));
  }

  recordStep(request: RecordStepRequest): Promise<RecordStepResult> {
    return this.transaction((tx) => recordStepIn(tx, request));
  }

  migrate(): Promise<MigrationReport> {
    const migrations = loadMigrations('sqlite');
    const latest = latestVersion(migrations);
    // The write lock is taken first: a second process migrating waits, then sees our rows.
    return this.write(() => {
      const applied: string[] = [];
      this.writer.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT`);
      const current = appliedVersion(this.writer);
      if (current > latest) throw tooNewError(current, latest);
      for (const m of migrations.filter((m) => m.version > current)) {
        this.writer
          .prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)')
          .run(m.version, m.name, isoNow(this.clock));
        this.writer.exec(m.sql);
        applied.push(`${String(m.version).padStart(4, '0')}_${m.name}`);
      }
      return { applied, version: latest };
    });
  }

  schemaState(): Promise<SchemaState> {
    const latest = latestVersion(loadMigrations('sqlite'));
    return this.read(() => Promise.resolve(schemaStateOf(appliedVersion(this.reader), latest)));
  }

  /** Readiness: the file is the one opened (looked at now), and the write lock can be had (then let go at once). */
  probe(): Promise<void> {
    this.checkFile();
    return this.write(() => Promise.resolve());
  }

  close(): Promise<void> {
    return this.exclusive(() => {
      if (this.reader !== this.writer && this.reader.open) this.reader.close();
      if (this.writer.open) this.writer.close();
      return Promise.resolve();
    });
  }

  /**
   * Writes go through the write lock in turn; reads go straight to the read connection. Each method's
   * wrapper is made once, on first use (every store call passes through here).
   */
  private route<S extends object>(part: StorePart, onWriter: S, onReader: S): S {
    // By the method itself, so one replaced on the object (a test's spy) is wrapped anew.
    const wrapped = new WeakMap<object, (...args: unknown[]) => Promise<unknown>>();
    const wrap = (property: string, call: (...a: unknown[]) => Promise<unknown>) => {
      if (isWriteMethod(part, property)) {
        return (...args: unknown[]) => this.write(() => call.apply(onWriter, args));
      }
      const readCall = Reflect.get(onReader, property) as (...a: unknown[]) => Promise<unknown>;
      return (...args: unknown[]) => this.read(() => readCall.apply(onReader, args));
    };
    return new Proxy(onWriter, {
      get: (object, property, receiver) => {
        const value: unknown = Reflect.get(object, property, receiver);
        if (typeof value !== 'function' || typeof property !== 'string') return value;
        let fn = wrapped.get(value);
        if (fn === undefined) {
          fn = wrap(property, value as (...a: unknown[]) => Promise<unknown>);
          wrapped.set(value, fn);
        }
        return fn;
      },
    });
  }

  /** `fn` inside `BEGIN IMMEDIATE … COMMIT` on the write connection, once the lock is had. */
  private write<T>(fn: () => T | Promise<T>): Promise<T> {
    return this.exclusive(async () => {
      await this.begin();
      try {
        const value = await fn();
        this.commits.run();
        return value;
      } catch (error) {
        if (this.writer.inTransaction) this.rollbacks.run();
        throw this.failure(error);
      }
    });
  }

  private async read<T>(fn: () => Promise<T>): Promise<T> {
    if (this.reader === this.writer) return this.exclusive(fn);
    this.assertFileIntact();
    try {
      return await untilFree(this.clock, this.path, this.clock.now() + this.lockWaitMs, this.lockWaitMs, fn);
    } catch (error) {
      throw this.failure(error);
    }
  }

  private async begin(): Promise<void> {
    this.assertFileIntact();
    try {
      await untilFree(this.clock, this.path, this.clock.now() + this.lockWaitMs, this.lockWaitMs, () =>
        this.begins.run(),
      );
    } catch (error) {
      throw this.failure(error);
    }
    try {
      this.assertSchemaKnown();
    } catch (error) {
      this.rollbacks.run();
      throw error;
    }
  }

  /** Under the write lock: a schema someone migrated past this code's refuses the write. */
  private assertSchemaKnown(): void {
    const cookie = this.cookie.get()?.schema_version;
    if (cookie === this.schemaCookie) return;
    const version = appliedVersion(this.writer);
    const latest = latestVersion(loadMigrations('sqlite'));
    if (version > latest) throw tooNewError(version, latest);
    this.schemaCookie = cookie;
  }

  /** Refuses once the file is known replaced; looks again when FILE_CHECK_MS have passed since the last look. */
  private assertFileIntact(): void {
    if (this.replaced === undefined) {
      const since = this.clock.now() - this.fileCheckedAt;
      // A clock that went back (the simulator's, handed to another process) looks again too.
      if (since >= FILE_CHECK_MS || since < 0) this.checkFile();
    }
    if (this.replaced !== undefined) throw this.replaced;
  }

  /** Looks whether the path still names the file opened; once it does not, the store refuses everything. */
  private checkFile(): void {
    if (this.replaced !== undefined || this.identity === undefined) return;
    this.fileCheckedAt = this.clock.now();
    const now = fileIdentity(this.path);
    if (now?.dev === this.identity.dev && now.ino === this.identity.ino) return;
    this.replaced = replacedError(this.path, now === undefined ? 'deleted' : 'replaced');
  }

  /**
   * What a failed operation throws: `STORE_FILE_REPLACED` when the file is no longer the one opened
   * (looked at now: a deleted file is a likely cause of a failing statement), else the store's error.
   */
  private failure(error: unknown): unknown {
    if (error instanceof OncelyError) return error;
    this.checkFile();
    return this.replaced ?? asStoreError(error, this.path);
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.tail.then(fn, fn);
    this.tail = run.catch(() => undefined);
    return run;
  }
}

function configure(db: Database.Database): void {
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 0');
}

/**
 * Runs `attempt` until no other connection holds the lock it needs, pausing between tries (2 ms
 * growing to 25 ms) so the event loop runs meanwhile; past the deadline, `STORE_UNAVAILABLE`.
 */
async function untilFree<T>(
  clock: Clock,
  path: string,
  deadline: number,
  waitMs: number,
  attempt: () => T | Promise<T>,
): Promise<T> {
  for (let tryNo = 0; ; tryNo++) {
    try {
      return await attempt();
    } catch (error) {
      if (!isBusy(error)) throw error;
      if (clock.now() >= deadline) throw lockedTooLong(path, waitMs);
      await clock.sleep(Math.min(2 + tryNo * 2, 25));
    }
  }
}

function appliedVersion(db: Database.Database): number {
  const table = db
    .prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`)
    .get();
  if (table === undefined) return 0;
  const row = db.prepare('SELECT MAX(version) AS v FROM schema_migrations').get() as { v: number | null };
  return row.v ?? 0;
}

function fileIdentity(path: string): FileIdentity | undefined {
  const stat = statSync(path, { throwIfNoEntry: false });
  return stat === undefined ? undefined : { dev: stat.dev, ino: stat.ino };
}

function notFound(path: string): OncelyError {
  return new OncelyError(
    'STORE_NOT_FOUND',
    `there is no database at ${path}; if this is the first run, create it with ` +
      `\`oncely migrate --create --database-url sqlite:${path}\` (\`serve\`, \`worker\` and \`keys create\` ` +
      'also take --create), otherwise restore it from a backup (starting over would forget calls that took effect)',
    { details: { path } },
  );
}

function replacedError(path: string, what: 'deleted' | 'replaced' = 'deleted'): OncelyError {
  return new OncelyError(
    'STORE_FILE_REPLACED',
    `the database file ${path} was ${what} while this process had it open; it refuses to go on, so ` +
      'nothing is recorded in a ledger no one will read. Restore the file, then restart the process',
    { details: { path } },
  );
}

function asOpenError(error: unknown, path: string): unknown {
  if (error instanceof OncelyError) return error;
  const mapped = asStoreError(error, path);
  if (mapped !== error) return mapped;
  return new OncelyError('STORE_UNAVAILABLE', `cannot open the SQLite database ${path}: ${String(error)}`, {
    cause: error,
  });
}
