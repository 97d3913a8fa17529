import { hostname } from 'node:os';
import {
  DEFAULT_LANDING_MARGIN_MS,
  DEFAULT_MAX_ATTEMPTS,
  attemptMayLand,
  decideCall,
  type Actor,
  type CallDecision,
  type CallFacts,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import { openStore, type OpenStoreOptions, type Store } from '../store/index.js';
import { realClock, type Clock } from '../util/clock.js';

/** Where the ledger says what went wrong loudly (a pino logger fits). */
export interface LedgerLog {
  error(fields: Record<string, unknown>, message: string): void;
}

export interface LedgerOptions {
  /** This process in the ledger's history; default `host:pid`. */
  readonly actorId?: string;
  /**
   * Added to an attempt's timeout before the attempt is taken to be unable to land (clock skew, a
   * slow commit, a process that froze mid-request); default 5000 ms.
   */
  readonly landingMarginMs?: number;
  /** Attempts of one key before it is never re-opened again; default 3. */
  readonly maxAttempts?: number;
  /** Where a conflict is logged at error level; default standard error. */
  readonly log?: LedgerLog;
  /**
   * The lease of a tool slot (a tool with `concurrency`), renewed while its call runs: how long a
   * crashed process's slot stays taken; default 30000 ms.
   */
  readonly toolSlotLeaseMs?: number;
  /**
   * The time of every attempt's timeout, backoff, slot renewal and wait, and of what may still land;
   * default the machine's. Give the store the same clock (`openStore(url, { clock })`).
   */
  readonly clock?: Clock;
  /** The jitter of a read's backoff, a number in [0, 1); default `Math.random`. */
  readonly random?: () => number;
}

export const DEFAULT_TOOL_SLOT_LEASE_MS = 30_000;

const stderrLog: LedgerLog = {
  error: (fields, message) =>
    process.stderr.write(`${JSON.stringify({ level: 'error', ...fields, msg: message })}\n`),
};

/**
 * The guarded call's handle: a store, the runtime actor its writes are recorded under, the attempts
 * of this process still running (a timed-out call whose tool has not answered yet), and the late
 * outcomes still expected. `close()` waits for those.
 */
export class Ledger {
  readonly store: Store;
  readonly actor: Actor;
  readonly landingMarginMs: number;
  readonly maxAttempts: number;
  readonly log: LedgerLog;
  readonly toolSlotLeaseMs: number;
  readonly clock: Clock;
  readonly random: () => number;
  private readonly inFlight = new Set<Promise<void>>();
  /** Attempts whose execution has not settled yet, by tenant and key. */
  private readonly running = new Map<string, number>();

  constructor(store: Store, options: LedgerOptions = {}) {
    this.store = store;
    this.actor = { kind: 'runtime', id: options.actorId ?? `${hostname()}:${process.pid}` };
    this.landingMarginMs = options.landingMarginMs ?? DEFAULT_LANDING_MARGIN_MS;
    this.maxAttempts = options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
    this.log = options.log ?? stderrLog;
    this.toolSlotLeaseMs = options.toolSlotLeaseMs ?? DEFAULT_TOOL_SLOT_LEASE_MS;
    this.clock = options.clock ?? realClock;
    // The one default draw: everything below the runtime takes its jitter from here.
    // eslint-disable-next-line no-restricted-properties
    this.random = options.random ?? Math.random;
  }

  /** Keeps a background write (a late outcome) so `drain()` and `close()` can wait for it. */
  track(work: Promise<void>): void {
    const tracked = work.finally(() => this.inFlight.delete(tracked));
    this.inFlight.add(tracked);
  }

  /** Counts an execution of this key as running in this process until it settles, however late. */
  holdAttempt(tenantId: string, key: string, execution: Promise<unknown>): void {
    const id = `${tenantId}\u0000${key}`;
    this.running.set(id, (this.running.get(id) ?? 0) + 1);
    const release = (): void => {
      const left = (this.running.get(id) ?? 1) - 1;
      if (left <= 0) this.running.delete(id);
      else this.running.set(id, left);
    };
    execution.then(release, release);
  }

  /** An attempt of this key is still running in this process (its tool has not answered yet). */
  attemptInFlight(tenantId: string, key: string): boolean {
    return this.running.has(`${tenantId}\u0000${key}`);
  }

  /** Whether the record's last attempt may still land, as far as this process can tell. */
  mayLand(record: ToolExecutionRecord): boolean {
    return attemptMayLand({
      record,
      inFlightHere: this.attemptInFlight(record.tenantId, record.idempotencyKey),
      otherLeaseLive: false,
      nowMs: this.clock.now(),
      marginMs: this.landingMarginMs,
    });
  }

  /** What the decision table says of an existing record, with the facts this process knows. */
  decide(
    record: ToolExecutionRecord,
    caller: CallFacts['caller'],
    hasHook: boolean,
  ): CallDecision & { readonly mayLand: boolean } {
    const mayLand = this.mayLand(record);
    const decision = decideCall({
      record: {
        status: record.status,
        settledBy: record.settledBy?.kind ?? null,
        conflicted: record.conflictAt !== null,
      },
      approval: 'not_needed',
      caller,
      hasHook,
      mayLand,
      attemptsExhausted: this.attemptsExhausted(record),
    });
    return { ...decision, mayLand };
  }

  /** The key has had its maximum of attempts. */
  attemptsExhausted(record: ToolExecutionRecord): boolean {
    return record.attempt >= this.maxAttempts;
  }

  /** A real outcome contradicted a settled record: say so loudly. */
  reportConflict(record: ToolExecutionRecord | undefined, what: string, attempt: number): void {
    if (record === undefined) return;
    this.log.error(
      {
        conflict: true,
        code: 'LEDGER_CONFLICT',
        tenantId: record.tenantId,
        idempotencyKey: record.idempotencyKey,
        status: record.status,
        attempt,
        currentAttempt: record.attempt,
      },
      `ledger conflict on ${record.idempotencyKey}: ${what}, but the record is ${record.status} ` +
        `(attempt ${record.attempt}); check the downstream system and run ` +
        `\`oncely executions show ${record.idempotencyKey}\``,
    );
  }

  /**
   * Waits until every late outcome this process is still expecting has been written, or until
   * `timeoutMs` has passed (false: some are still out; their calls stay as recorded, unknown).
   */
  async drain(options: { timeoutMs?: number } = {}): Promise<boolean> {
    const deadline = this.clock.now() + (options.timeoutMs ?? Number.POSITIVE_INFINITY);
    while (this.inFlight.size > 0) {
      const left = deadline - this.clock.now();
      if (left <= 0) return false;
      const wait = new AbortController();
      const timer = Number.isFinite(left)
        ? this.clock.sleep(left, wait.signal).catch(() => undefined)
        : new Promise<never>(() => undefined);
      try {
        await Promise.race([Promise.allSettled([...this.inFlight]), timer]);
      } finally {
        wait.abort();
      }
    }
    return true;
  }

  async close(): Promise<void> {
    await this.drain();
    await this.store.close();
  }
}

/**
 * Opens a ledger on `sqlite:PATH` (migrated for you) or `postgres://…` (pass `migrate: true`, or run
 * `oncely migrate` first).
 *
 * @example
 * const ledger = await openLedger('sqlite:.oncely/oncely.db');
 */
export async function openLedger(
  url?: string,
  options: OpenStoreOptions & LedgerOptions = {},
): Promise<Ledger> {
  const store = await openStore(url, options);
  return new Ledger(store, options);
}
