import { setMaxListeners } from 'node:events';
import { unsafeSwitch } from '../crash/index.js';
import { OncelyError, errorInfo } from '../errors/index.js';
import type { RunStore } from '../store/index.js';
import type { Clock, ClockTimer } from '../util/clock.js';

export interface LeaseOptions {
  readonly runs: RunStore;
  readonly tenantId: string;
  readonly runId: string;
  readonly epoch: number;
  readonly owner: string;
  readonly leaseMs: number;
  /** The time of the renewals and of the lease's expiry. */
  readonly clock: Clock;
}

/** A test-only switch (`ONCELY_UNSAFE_TEST_SWITCHES`): the lease is never lost. */
const IGNORE_LOST_LEASE = unsafeSwitch('ignore-lost-lease');

/**
 * The driver's hold on a run: renewed every third of its length while the run is driven. When a
 * renewal finds the lease taken (a higher epoch: recovery, a cancel) or the lease runs out unrenewed
 * (the database unreachable, the process frozen), `signal` aborts: the model call and the tools in
 * flight are told to stop, and the driver stands down. Its writes are fenced by the epoch anyway.
 */
export class Lease {
  readonly #options: LeaseOptions;
  readonly #controller = new AbortController();
  readonly #timer: ClockTimer;
  #validUntil: number;
  #renewing: Promise<void> = Promise.resolve();

  constructor(options: LeaseOptions) {
    this.#options = options;
    // Every tool call of a step listens on it, and a step may have any number of calls.
    setMaxListeners(0, this.#controller.signal);
    this.#validUntil = options.clock.now() + options.leaseMs;
    this.#timer = options.clock.setInterval(
      () => this.#tick(),
      Math.max(10, Math.floor(options.leaseMs / 3)),
    );
  }

  get epoch(): number {
    return this.#options.epoch;
  }

  /** Aborted once the lease is lost; its reason is a `RUN_LEASE_LOST` error. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  get lost(): boolean {
    return this.#controller.signal.aborted;
  }

  /** Call when a fenced write found the lease gone. */
  lose(why: string): void {
    if (this.lost || IGNORE_LOST_LEASE) return;
    const { runId, epoch } = { runId: this.#options.runId, epoch: this.#options.epoch };
    this.#controller.abort(
      new OncelyError('RUN_LEASE_LOST', `lost the lease on run ${runId} (epoch ${epoch}): ${why}`, {
        details: { runId, epoch },
      }),
    );
  }

  /** Stops renewing and waits for a renewal in flight. */
  async stop(): Promise<void> {
    this.#options.clock.clearInterval(this.#timer);
    await this.#renewing;
  }

  #tick(): void {
    if (this.lost) return;
    if (this.#options.clock.now() > this.#validUntil) {
      this.lose('it expired before it could be renewed');
      return;
    }
    this.#renewing = this.#renewing.then(() => this.#renew());
  }

  async #renew(): Promise<void> {
    if (this.lost) return;
    const { runs, tenantId, runId, epoch, owner, leaseMs } = this.#options;
    const started = this.#options.clock.now();
    try {
      const held = await runs.renewLease({ tenantId, runId, leaseEpoch: epoch }, owner, leaseMs);
      if (held) this.#validUntil = started + leaseMs;
      else this.lose('another process claimed it, or it was cancelled');
    } catch (error) {
      // The database may be back before the lease runs out; the next tick checks the deadline.
      process.emitWarning(`oncely: could not renew the lease on run ${runId}: ${errorInfo(error).message}`);
    }
  }
}
