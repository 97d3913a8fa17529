import type { ToolSlotStore } from '../store/index.js';
import type { Clock } from '../util/clock.js';

interface Waiter {
  readonly tools: readonly string[];
  wake(): void;
}

/**
 * Wakes calls waiting for a slot of a limited tool when one is freed: by a release in this process,
 * directly, or by another process's, heard as a `slot` wake-up (`ringToolSlots`). Speed, never
 * truth: a waiter still looks again on its own timer, so a ring nobody hears only costs time.
 */
export class SlotBell {
  /** The waiters of each tool, oldest first (a Set keeps insertion order). */
  readonly #waiters = new Map<string, Set<Waiter>>();
  #rung = 0;

  /** Counts the rings so far: a wait given it ends at once if one came since (a release missed). */
  get rung(): number {
    return this.#rung;
  }

  /** A slot of `tool` was freed in this process: the oldest call waiting for it looks again now. */
  ring(tool: string): void {
    this.#rung += 1;
    this.#wakeOldest(tool);
  }

  /** A slot of some tool was freed elsewhere: the oldest waiter of each tool looks again now. */
  ringAll(): void {
    this.#rung += 1;
    for (const tool of [...this.#waiters.keys()]) this.#wakeOldest(tool);
  }

  /**
   * Waits until a slot of one of `tools` is freed (a ring), `ms` pass on `clock`, or `signal` aborts (rejecting
   * with its reason). Ends at once when a ring came after `since` (a `rung` read before the caller
   * last tried to take its slots).
   */
  wait(
    clock: Clock,
    tools: readonly string[],
    since: number,
    ms: number,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason as Error);
    if (this.#rung !== since) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const leave = (): void => {
        clock.clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        for (const tool of tools) {
          const waiters = this.#waiters.get(tool);
          waiters?.delete(waiter);
          if (waiters?.size === 0) this.#waiters.delete(tool);
        }
      };
      const wake = (): void => {
        leave();
        resolve();
      };
      const waiter: Waiter = { tools, wake };
      const onAbort = (): void => {
        leave();
        reject(signal?.reason as Error);
      };
      const timer = clock.setTimeout(wake, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
      for (const tool of tools) {
        const waiters = this.#waiters.get(tool) ?? new Set<Waiter>();
        waiters.add(waiter);
        this.#waiters.set(tool, waiters);
      }
    });
  }

  /** Calls waiting now, for tests and operators. */
  get waiting(): number {
    return new Set([...this.#waiters.values()].flatMap((w) => [...w])).size;
  }

  #wakeOldest(tool: string): void {
    const oldest = this.#waiters.get(tool)?.values().next();
    if (oldest !== undefined && oldest.done !== true) oldest.value.wake();
  }
}

/** One bell per slot store: every ledger of a store in this process shares its waiters. */
const bells = new WeakMap<ToolSlotStore, SlotBell>();

export function slotBell(slots: ToolSlotStore): SlotBell {
  let bell = bells.get(slots);
  if (bell === undefined) {
    bell = new SlotBell();
    bells.set(slots, bell);
  }
  return bell;
}

/**
 * Tells this process's calls waiting for a slot of the store that another process freed one (a
 * `slot` wake-up heard by the worker's listener): the oldest waiter of each tool looks again now.
 *
 * @example
 * store.wakeups?.listen({ onWake: (kind) => kind === 'slot' && ringToolSlots(store.toolSlots) });
 */
export function ringToolSlots(slots: ToolSlotStore): void {
  bells.get(slots)?.ringAll();
}
