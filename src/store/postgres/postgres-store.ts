import pg from 'pg';
import { OncelyError } from '../../errors/index.js';
import { latestVersion, loadMigrations, schemaStateOf, tooNewError } from '../migrations.js';
import type { ApiKeyStore } from '../api-key-store.js';
import type { LoopStepStore } from '../loop-step-store.js';
import type { WorkerStore } from '../worker-store.js';
import type { ToolSlotStore } from '../tool-slot-store.js';
import type { Wakeups } from '../wakeups.js';
import type { MonitorStore } from '../monitor-store.js';
import type { RunStore } from '../run-store.js';
import type { LedgerStore } from '../ledger-store.js';
import type { MigrationReport, SchemaState, Store, StoreTx } from '../store.js';
import { PostgresApiKeys } from './api-keys.js';
import { PostgresLedger, type Queryable } from './ledger.js';
import { PostgresLoopSteps } from './loop-steps.js';
import { PostgresWorkflows } from './workflows.js';
import type { WorkflowStore } from '../workflow-store.js';
import { PostgresWorkers } from './workers.js';
import { PostgresToolSlots } from './tool-slots.js';
import { PostgresWakeups } from './wakeups.js';
import { renewIfStalePlan } from './prepared.js';
import { PostgresMonitor } from './monitor.js';
import { PostgresRuns } from './runs.js';
import {
  recordStep,
  recordStepParams,
  recordSteps,
  reserveStep,
  reserveStepParams,
  reserveSteps,
} from './steps.js';
import { GroupCommit, type GroupCommitStats } from './group-commit.js';
import type {
  RecordStepRequest,
  RecordStepResult,
  ReserveStepRequest,
  ReserveStepResult,
} from '../step-writes.js';
import { isWriteMethod, type StorePart } from '../write-methods.js';
import { asStoreError } from './pg-errors.js';
import { realClock, type Clock } from '../../util/clock.js';
import { DEADLOCK_DETECTED, LOCK_NOT_AVAILABLE, SERIALIZATION_FAILURE, UNDEFINED_TABLE } from './sqlstate.js';

/**
 * The settings of the hot statements' connections (prepared.ts). Each hot statement is planned once
 * per connection, generically, and that plan is kept while its tables grow: a plan made on a young
 * table, whose few pages make a sequential scan look cheapest, would go on scanning the whole table
 * at every execution (a step's outcomes read every call ever recorded), and a bitmap scan of the
 * claim index would read the whole backlog at every claim. Both are off on these connections, so the
 * plan made on a table of any size reaches its rows by an index, in its order; every hot statement is
 * written to need nothing else (test/store/plans.test.ts).
 */
export const HOT_SETTINGS = {
  plan_cache_mode: 'force_generic_plan',
  enable_seqscan: 'off',
  enable_bitmapscan: 'off',
} as const;

/** Any fixed number: two processes migrating at once queue on this advisory lock. */
const MIGRATION_LOCK = 0x6f6e63656c79;

/**
 * Server-side limits set on every connection of the pool, so a frozen process cannot hold row locks
 * for as long as it is frozen and a stuck statement cannot hold a worker forever.
 */
export interface PostgresTimeouts {
  /** `statement_timeout`: the longest one statement may run; default 30000 ms. */
  readonly statementMs?: number;
  /** `lock_timeout`: the longest a statement waits for a row lock; default 10000 ms. */
  readonly lockMs?: number;
  /**
   * `idle_in_transaction_session_timeout`: a connection idle inside a transaction this long (its
   * process froze or hung mid-transaction) is closed by the server and its locks released; default 60000 ms.
   */
  readonly idleInTransactionMs?: number;
}

export const DEFAULT_POSTGRES_TIMEOUTS = {
  statementMs: 30_000,
  lockMs: 10_000,
  idleInTransactionMs: 60_000,
} as const satisfies Required<PostgresTimeouts>;

export interface PostgresStoreOptions {
  /** Called once at open with a warning the operator must see (e.g. `synchronous_commit` off). */
  readonly warn?: (message: string) => void;
  /** Connections of each pool (the hot statements', the others'); default 10. */
  readonly maxConnections?: number;
  readonly timeouts?: PostgresTimeouts;
  /**
   * Group commit of the run steps' writes (group-commit.ts): up to `maxGroup` runs' writes of one
   * kind in one statement, at most `maxInFlight` such statements of each kind at once. `false` sends
   * each write alone.
   */
  readonly groupCommit?: GroupCommitSettings | false;
  /**
   * The clock of the store's own pauses (the jittered pause before repeating a statement the server
   * rolled back for a transient cause); default the machine's. Every time the store writes is the
   * server's, `oncely_now()`. The simulator passes its virtual clock.
   */
  readonly clock?: Clock;
}

export interface GroupCommitSettings {
  readonly maxGroup: number;
  readonly maxInFlight: number;
}

export const DEFAULT_GROUP_COMMIT: GroupCommitSettings = { maxGroup: 16, maxInFlight: 2 };

/** SQLSTATEs after which a single statement outside a transaction was rolled back whole: safe to repeat. */
const TRANSIENT = new Set([SERIALIZATION_FAILURE, DEADLOCK_DETECTED, LOCK_NOT_AVAILABLE]);
const TRANSIENT_TRIES = 3;
/** How often an open store looks for a schema someone migrated past this code (writes then refuse). */
const SCHEMA_WATCH_MS = 5_000;
/** How long the pool waits for a connection to the server before the request fails (503). */
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * The pools' autocommit statements, each repeated (up to 3 tries, with a short jittered pause) when
 * the server rolled it back for a transient cause: a serialization failure, a deadlock, a lock it
 * could not get in time. Every store statement is one atomic compare-and-set or read, so a repeat
 * is the same statement against the state as it now stands. Statements inside `transaction()` are
 * not repeated: the caller's transaction fails and its caller decides. A hot statement (prepared
 * under a name, see prepared.ts) goes to `hot`, whose connections keep generic plans; any other to
 * `pool`, whose connections plan each statement for its values.
 */
function retrying(clock: Clock, pool: pg.Pool, hot: pg.Pool = pool): Queryable {
  const query = async (...args: Parameters<pg.Pool['query']>): Promise<unknown> => {
    const [statement] = args as unknown[];
    const target = typeof statement === 'object' && statement !== null && 'name' in statement ? hot : pool;
    for (let tryNo = 1; ; tryNo++) {
      try {
        return await (target.query as (...a: unknown[]) => Promise<unknown>)(...args);
      } catch (error) {
        const code = (error as { code?: unknown }).code;
        // A prepared plan the server refused (its table changed) is prepared anew on the next try.
        const transient = (typeof code === 'string' && TRANSIENT.has(code)) || renewIfStalePlan(error);
        if (tryNo >= TRANSIENT_TRIES || !transient) throw asStoreError(error);
        await clock.sleep(5 + Math.floor(Math.random() * 20 * tryNo));
      }
    }
  };
  return { query } as unknown as Queryable;
}

/** The production store: any number of processes on any number of machines share one PostgreSQL. */
export class PostgresStore implements Store {
  readonly dialect = 'postgres' as const;
  readonly ledger: LedgerStore;
  readonly runs: RunStore;
  readonly apiKeys: ApiKeyStore;
  readonly loopSteps: LoopStepStore;
  readonly workflows: WorkflowStore;
  readonly workers: WorkerStore;
  readonly toolSlots: ToolSlotStore;
  readonly monitor: MonitorStore;
  /** Set once the schema is seen newer than this code: every write refuses with it. */
  private schemaTooNew: OncelyError | undefined;
  private readonly schemaWatch: NodeJS.Timeout;
  private closing: Promise<void> | undefined;

  /** The pool's statements, each repeated on a transient failure. */
  private readonly db: Queryable;
  /** The ledger unguarded, for the step writes (which check the schema themselves). */
  private readonly rawLedger: PostgresLedger;
  /** The step writes, grouped across runs (undefined: each alone). */
  private readonly reserveGroup: GroupCommit<ReserveStepRequest, ReserveStepResult> | undefined;
  private readonly recordGroup: GroupCommit<RecordStepRequest, RecordStepResult> | undefined;

  private constructor(
    private readonly pool: pg.Pool,
    private readonly hotPool: pg.Pool,
    /** LISTEN/NOTIFY wake-ups, each listener on a connection of its own. */
    readonly wakeups: Wakeups,
    groupCommit: GroupCommitSettings | false,
    private readonly clock: Clock,
  ) {
    const db = retrying(clock, pool, hotPool);
    this.db = db;
    this.rawLedger = new PostgresLedger(db);
    const ledger = this.rawLedger;
    if (groupCommit !== false) {
      const runOf = (save: { fence: { tenantId: string; runId: string } }): string =>
        `run\u0000${save.fence.tenantId}\u0000${save.fence.runId}`;
      const keyOf = (r: { tenantId: string; idempotencyKey: string }): string =>
        `key\u0000${r.tenantId}\u0000${r.idempotencyKey}`;
      this.reserveGroup = new GroupCommit({
        ...groupCommit,
        check: (request) => void reserveStepParams(request),
        touches: (request) => [runOf(request.save), ...request.reservations.map(keyOf)],
        single: (request) => reserveStep(db, ledger, request),
        group: (requests) => reserveSteps(db, ledger, requests),
      });
      this.recordGroup = new GroupCommit({
        ...groupCommit,
        check: (request) => void recordStepParams(request),
        touches: (request) => [runOf(request.save), ...request.transitions.map(keyOf)],
        single: (request) => recordStep(db, ledger, request),
        group: (requests) => recordSteps(db, ledger, requests),
      });
    }
    this.ledger = this.guard('ledger', this.rawLedger);
    this.runs = this.guard('runs', new PostgresRuns(db));
    this.apiKeys = this.guard('apiKeys', new PostgresApiKeys(db));
    this.loopSteps = this.guard('loopSteps', new PostgresLoopSteps(db));
    this.workflows = this.guard('workflows', new PostgresWorkflows(db));
    this.workers = this.guard('workers', new PostgresWorkers(db));
    this.toolSlots = this.guard('toolSlots', new PostgresToolSlots(db));
    this.monitor = new PostgresMonitor(db);
    // Another process's `oncely migrate` to a newer oncely: seen within SCHEMA_WATCH_MS.
    this.schemaWatch = setInterval(() => {
      this.schemaState().catch(() => undefined);
    }, SCHEMA_WATCH_MS);
    this.schemaWatch.unref();
  }

  /**
   * Writes refuse once the schema is newer than this code; reads go on. Each write method's wrapper
   * is made once, on first use (every store call passes through here).
   */
  private guard<S extends object>(part: StorePart, target: S): S {
    // By the method itself, so one replaced on the object (a test's spy) is wrapped anew.
    const wrapped = new WeakMap<object, (...args: unknown[]) => Promise<unknown>>();
    return new Proxy(target, {
      get: (object, property, receiver) => {
        const value: unknown = Reflect.get(object, property, receiver);
        if (typeof value !== 'function' || typeof property !== 'string') return value;
        if (!isWriteMethod(part, property)) return value;
        let fn = wrapped.get(value);
        if (fn === undefined) {
          const method = value as (...a: unknown[]) => Promise<unknown>;
          fn = (...args: unknown[]) => {
            if (this.schemaTooNew !== undefined) return Promise.reject(this.schemaTooNew);
            return method.apply(object, args);
          };
          wrapped.set(value, fn);
        }
        return fn;
      },
    });
  }

  static async open(url: string, options: PostgresStoreOptions = {}): Promise<PostgresStore> {
    const timeouts = { ...DEFAULT_POSTGRES_TIMEOUTS, ...options.timeouts };
    const poolFor = (settings: Readonly<Record<string, string>>): pg.Pool => {
      const pool = new pg.Pool({
        connectionString: url,
        max: options.maxConnections ?? 10,
        connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
        types: { getTypeParser },
        statement_timeout: timeouts.statementMs,
        lock_timeout: timeouts.lockMs,
        idle_in_transaction_session_timeout: timeouts.idleInTransactionMs,
        options: Object.entries(settings)
          .map(([name, value]) => `-c ${name}=${value}`)
          .join(' '),
      });
      // An idle client's error (the server went away) must not crash the process; the next query reports it.
      pool.on('error', () => undefined);
      return pool;
    };
    // Statements planned for their values (lists, transactions); the hot statements on connections
    // of their own, under generic plans (prepared.ts).
    const pool = poolFor({ plan_cache_mode: 'force_custom_plan' });
    const hotPool = poolFor(HOT_SETTINGS);
    try {
      const { rows } = await pool.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
      if (rows[0]?.synchronous_commit === 'off') {
        (options.warn ?? ((m: string) => process.stderr.write(`${m}\n`)))(
          'WARNING: PostgreSQL synchronous_commit is off. A database server crash can lose commits the ' +
            'ledger already reported, so a tool call could run twice. Set synchronous_commit = on.',
        );
      }
    } catch (cause) {
      await Promise.all([pool.end(), hotPool.end()]);
      throw new OncelyError(
        'STORE_UNAVAILABLE',
        `cannot reach PostgreSQL at ${redact(url)}: ${String(cause)}`,
        {
          cause,
        },
      );
    }
    return new PostgresStore(
      pool,
      hotPool,
      new PostgresWakeups(url, (text, params) => pool.query(text, params)),
      options.groupCommit ?? DEFAULT_GROUP_COMMIT,
      options.clock ?? realClock,
    );
  }

  async transaction<T>(fn: (tx: StoreTx) => Promise<T>): Promise<T> {
    if (this.schemaTooNew !== undefined) throw this.schemaTooNew;
    const client = await this.pool.connect().catch((error: unknown) => {
      throw asStoreError(error);
    });
    // A checked-out client whose connection the server ends (idle in transaction too long, a
    // restart) emits 'error'; unheard, that would crash the process. The statement in flight
    // rejects with it, and the transaction fails as it should.
    let broken: Error | undefined;
    const onError = (error: Error): void => {
      broken = error;
    };
    client.on('error', onError);
    try {
      await client.query('BEGIN');
      const value = await fn({
        ledger: new PostgresLedger(client),
        runs: new PostgresRuns(client),
        workflows: new PostgresWorkflows(client),
      });
      await client.query('COMMIT');
      return value;
    } catch (error) {
      const rolledBack = await client.query('ROLLBACK').then(
        () => true,
        () => false,
      );
      // A connection that cannot even roll back is not given back to the pool.
      if (!rolledBack) broken ??= error instanceof Error ? error : new Error(String(error));
      // This transaction fails; the next one prepares its statements anew.
      renewIfStalePlan(error);
      throw asStoreError(error);
    } finally {
      client.removeListener('error', onError);
      client.release(broken);
    }
  }

  async reserveStep(request: ReserveStepRequest): Promise<ReserveStepResult> {
    if (this.schemaTooNew !== undefined) throw this.schemaTooNew;
    if (this.reserveGroup !== undefined) return this.reserveGroup.submit(request);
    return reserveStep(this.db, this.rawLedger, request);
  }

  async recordStep(request: RecordStepRequest): Promise<RecordStepResult> {
    if (this.schemaTooNew !== undefined) throw this.schemaTooNew;
    if (this.recordGroup !== undefined) return this.recordGroup.submit(request);
    return recordStep(this.db, this.rawLedger, request);
  }

  /** What group commit did so far: statements sent and the step writes they carried, by kind. */
  groupCommitStats(): { reserve: GroupCommitStats; record: GroupCommitStats } | undefined {
    if (this.reserveGroup === undefined || this.recordGroup === undefined) return undefined;
    return { reserve: { ...this.reserveGroup.stats }, record: { ...this.recordGroup.stats } };
  }

  async migrate(): Promise<MigrationReport> {
    const migrations = loadMigrations('postgres');
    const latest = latestVersion(migrations);
    const client = await this.pool.connect();
    const applied: string[] = [];
    try {
      await client.query('BEGIN');
      // A migration may rewrite large tables: the pool's statement and lock timeouts do not apply.
      await client.query('SET LOCAL statement_timeout = 0');
      await client.query('SET LOCAL lock_timeout = 0');
      // The lock is taken before anything is read, so a second migrator waits and then sees our rows.
      await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      const current = await appliedVersion(client);
      if (current > latest) throw tooNewError(current, latest);
      for (const m of migrations.filter((m) => m.version > current)) {
        await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
          m.version,
          m.name,
        ]);
        await client.query(m.sql);
        applied.push(`${String(m.version).padStart(4, '0')}_${m.name}`);
      }
      await client.query('COMMIT');
      return { applied, version: latest };
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      if (error instanceof OncelyError) throw error;
      throw new OncelyError(
        'SCHEMA_MIGRATION_FAILED',
        `migration failed and was rolled back: ${String(error)}`,
        {
          cause: error,
        },
      );
    } finally {
      client.release();
    }
  }

  async schemaState(): Promise<SchemaState> {
    const state = schemaStateOf(
      await appliedVersion(retrying(this.clock, this.pool)),
      latestVersion(loadMigrations('postgres')),
    );
    this.schemaTooNew = state.state === 'too-new' ? tooNewError(state.version, state.latest) : undefined;
    return state;
  }

  /** Readiness: the schema is one this code may write, and the tables answer (a lock on them shows). */
  async probe(): Promise<void> {
    const state = await this.schemaState();
    if (this.schemaTooNew !== undefined) throw this.schemaTooNew;
    if (state.state !== 'current') return;
    await retrying(this.clock, this.pool).query('SELECT 1 FROM runs LIMIT 0');
    await retrying(this.clock, this.pool).query('SELECT 1 FROM tool_executions LIMIT 0');
  }

  /** Ends the pools; closing again (a ledger and its caller both closing) waits for the same end. */
  close(): Promise<void> {
    clearInterval(this.schemaWatch);
    this.closing ??= Promise.all([this.pool.end(), this.hotPool.end()]).then(() => undefined);
    return this.closing;
  }
}

async function appliedVersion(db: Queryable): Promise<number> {
  try {
    const { rows } = await db.query<{ v: number | null }>('SELECT MAX(version) AS v FROM schema_migrations');
    return rows[0]?.v ?? 0;
  } catch (error) {
    if ((error as { code?: string }).code === UNDEFINED_TABLE) return 0;
    throw error;
  }
}

const JSON_OIDS = new Set([114, 3802]);

/**
 * JSON columns come back as text, as they do from SQLite, so one decoder serves both stores (pg would
 * otherwise hand back a JSON string value as a bare JavaScript string, indistinguishable from text).
 */
function getTypeParser(oid: number, format?: 'text' | 'binary'): (value: string) => unknown {
  if (JSON_OIDS.has(oid)) return (value: string) => value;
  return format === 'binary'
    ? (pg.types.getTypeParser(oid, 'binary') as (value: string) => unknown)
    : (pg.types.getTypeParser(oid, 'text') as (value: string) => unknown);
}

/** The URL with its password masked, for messages. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparseable URL)';
  }
}
