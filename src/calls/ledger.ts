import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Actor } from '../ledger/index.js';
import { openStore, type OpenStoreOptions, type Store } from '../store/index.js';

/**
 * The guarded call's handle: a store, the runtime actor its writes are recorded under, and the late
 * outcomes still in flight (a timed-out call whose tool answers later). `close()` waits for those.
 */
export class Ledger {
  readonly store: Store;
  readonly actor: Actor;
  private readonly inFlight = new Set<Promise<void>>();

  constructor(store: Store, options: { actorId?: string } = {}) {
    this.store = store;
    this.actor = { kind: 'runtime', id: options.actorId ?? `${hostname()}:${process.pid}` };
  }

  /** Keeps a background write (a late outcome) so `drain()` and `close()` can wait for it. */
  track(work: Promise<void>): void {
    const tracked = work.finally(() => this.inFlight.delete(tracked));
    this.inFlight.add(tracked);
  }

  /**
   * Waits until every late outcome this process is still expecting has been written, or until
   * `timeoutMs` has passed (false: some are still out; their calls stay as recorded, unknown).
   */
  async drain(options: { timeoutMs?: number } = {}): Promise<boolean> {
    const deadline = Date.now() + (options.timeoutMs ?? Number.POSITIVE_INFINITY);
    while (this.inFlight.size > 0) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      const timer = Number.isFinite(left)
        ? sleep(left, 'timeout' as const)
        : new Promise<never>(() => undefined);
      await Promise.race([Promise.allSettled([...this.inFlight]), timer]);
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
  options: OpenStoreOptions & { actorId?: string } = {},
): Promise<Ledger> {
  const store = await openStore(url, options);
  return new Ledger(store, options.actorId === undefined ? {} : { actorId: options.actorId });
}
