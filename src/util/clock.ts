/**
 * Time as the runtime sees it: every clock read, timer, timeout, lease, backoff and sleep of the
 * runtime and its SQLite store goes through one of these. Production passes `realClock`; the
 * simulator passes a virtual clock whose time moves only when the simulated world says so, so a
 * schedule replays exactly from its seed. (PostgreSQL keeps the times it writes in SQL,
 * `oncely_now()`; its store's clock times only its pauses before repeating a statement.)
 */
export interface Clock {
  /** Milliseconds since the epoch, as `Date.now()`. */
  now(): number;
  /** Runs `fn` after `ms`, as `setTimeout`; the handle is for `clearTimeout` and `unref`. */
  setTimeout(fn: () => void, ms: number): ClockTimer;
  clearTimeout(timer: ClockTimer | undefined): void;
  /** Runs `fn` every `ms`, as `setInterval`. */
  setInterval(fn: () => void, ms: number): ClockTimer;
  clearInterval(timer: ClockTimer | undefined): void;
  /**
   * Resolves after `ms`; rejects with the signal's reason if it aborts first (as
   * `timers/promises`' `setTimeout`).
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** A signal that aborts after `ms` with a `TimeoutError` `DOMException` (as `AbortSignal.timeout`). */
  timeoutSignal(ms: number): AbortSignal;
}

/** What a timer handle offers: a timer that must not keep the process alive is `unref`'d. */
export interface ClockTimer {
  unref(): ClockTimer;
}

/** The clock of the machine: Node's own timers. */
export const realClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (timer) => clearTimeout(timer as NodeJS.Timeout | undefined),
  setInterval: (fn, ms) => setInterval(fn, ms),
  clearInterval: (timer) => clearInterval(timer as NodeJS.Timeout | undefined),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted === true) {
        reject(signal.reason as Error);
        return;
      }
      const onAbort = (): void => {
        clearTimeout(timer);
        reject(signal?.reason as Error);
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    }),
  timeoutSignal: (ms) => AbortSignal.timeout(ms),
};

/** The ISO time of a clock's now (what the SQLite store writes). */
export function isoNow(clock: Clock): string {
  return new Date(clock.now()).toISOString();
}
