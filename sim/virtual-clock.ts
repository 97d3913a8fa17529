import { AsyncResource } from 'node:async_hooks';
import type { Clock, ClockTimer } from '../src/util/clock.js';

/*
 * Simulated time. One world clock holds every timer of every simulated process; time moves only when
 * the simulator says so (to the next timer due, when nothing else can run), so a schedule's timing
 * comes from its seed alone. Each process sees the world through its own `ProcessClock`: a frozen
 * process's timers do not fire until it thaws (a SIGSTOP), a dead process's never do.
 */

interface Timer {
  readonly seq: number;
  at: number;
  readonly owner: string;
  readonly fn: () => void;
  readonly everyMs: number | undefined;
  cancelled: boolean;
}

class Handle implements ClockTimer {
  constructor(readonly timer: Timer) {}
  unref(): ClockTimer {
    return this;
  }
}

/** Who may run now: the simulator answers for each owner (alive and not frozen). */
export type Runnable = (owner: string) => boolean;

export class WorldClock {
  #now: number;
  #seq = 0;
  readonly #timers: Timer[] = [];

  constructor(
    startMs: number,
    private readonly runnable: Runnable,
  ) {
    this.#now = startMs;
  }

  now(): number {
    return this.#now;
  }

  add(owner: string, fn: () => void, ms: number, everyMs?: number): Timer {
    // The async context of the caller (which process set it), as `AsyncLocalStorage.snapshot()`
    // keeps it, without the bound function that one makes.
    const context = new AsyncResource('sim-timer');
    const timer: Timer = {
      seq: (this.#seq += 1),
      at: this.#now + Math.max(0, ms),
      owner,
      fn: () => context.runInAsyncScope(fn),
      everyMs,
      cancelled: false,
    };
    this.#timers.push(timer);
    return timer;
  }

  cancel(timer: Timer | undefined): void {
    if (timer !== undefined) timer.cancelled = true;
  }

  /** Drops every timer of an owner (its process died). */
  dropOwner(owner: string): void {
    for (const t of this.#timers) if (t.owner === owner) t.cancelled = true;
  }

  /** Live timers whose owner may run, earliest first (ties in the order they were set). */
  #due(): Timer[] {
    for (let i = this.#timers.length - 1; i >= 0; i -= 1)
      if (this.#timers[i]!.cancelled) this.#timers.splice(i, 1);
    return this.#timers.filter((t) => this.runnable(t.owner)).sort((a, b) => a.at - b.at || a.seq - b.seq);
  }

  /** Fires the earliest due timer (moving time to it); false when there is none. */
  fireNext(): boolean {
    const [next] = this.#due();
    if (next === undefined) return false;
    this.#now = Math.max(this.#now, next.at);
    if (next.everyMs === undefined) next.cancelled = true;
    else next.at = this.#now + Math.max(1, next.everyMs);
    next.fn();
    return true;
  }
}

/** One simulated process's view of the world clock. */
export class ProcessClock implements Clock {
  constructor(
    private readonly world: WorldClock,
    readonly owner: string,
  ) {}

  now(): number {
    return this.world.now();
  }

  setTimeout(fn: () => void, ms: number): ClockTimer {
    return new Handle(this.world.add(this.owner, fn, ms));
  }

  clearTimeout(timer: ClockTimer | undefined): void {
    this.world.cancel((timer as Handle | undefined)?.timer);
  }

  setInterval(fn: () => void, ms: number): ClockTimer {
    return new Handle(this.world.add(this.owner, fn, ms, ms));
  }

  clearInterval(timer: ClockTimer | undefined): void {
    this.world.cancel((timer as Handle | undefined)?.timer);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted === true) {
        reject(signal.reason as Error);
        return;
      }
      const onAbort = (): void => {
        this.world.cancel(timer);
        reject(signal?.reason as Error);
      };
      const timer = this.world.add(
        this.owner,
        () => {
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
        ms,
      );
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  timeoutSignal(ms: number): AbortSignal {
    const controller = new AbortController();
    this.world.add(
      this.owner,
      () => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')),
      ms,
    );
    return controller.signal;
  }
}
