import type { WakeListener, Wakeups } from '../store/wakeups.js';
import { runEventsHint } from '../store/wakeups.js';

/** One event stream's ear on its run: rung when another process wrote the run's events. */
export interface RunEar {
  /**
   * Resolves when the run's events were rung since the last wait (at once, if they were while the
   * stream was reading; also once when the run's watch is in place), after `ms`, or when `signal`
   * aborts; whichever comes first.
   */
  wait(ms: number, signal: AbortSignal): Promise<void>;
  /** Stops listening for this stream. */
  close(): void;
}

interface Ear {
  rung: boolean;
  wake: (() => void) | undefined;
}

/**
 * The API process's run-event hints (store.wakeups: LISTEN/NOTIFY on PostgreSQL, each run's Redis
 * stream with ONCELY_REDIS_URL): an event stream (SSE) reads on as soon as a worker anywhere wrote its run's
 * events, instead of at its next poll. Each stream's run is watched (on PostgreSQL
 * a row in run_event_watches, so only watched runs' steps send a NOTIFY; over Redis the run's stream
 * is read). One listening connection per API server, opened with it and
 * closed with it. Speed, never truth: streams still read on their timer, so a
 * lost connection (or a store that carries no hints, such as SQLite alone) is only slower.
 */
export class RunEventBell {
  readonly #ears = new Map<string, Set<Ear>>();
  #listener: WakeListener | undefined;
  /** Hints heard, for tests and metrics. */
  heard = 0;

  constructor(wakeups: Wakeups | undefined) {
    this.#listener = wakeups?.listen({
      onWake: () => undefined,
      onRunEvents: (tenantId, runId) => this.ring(tenantId, runId),
    });
  }

  /** True while hints can be heard (the listening connection is up). */
  get listening(): boolean {
    return this.#listener?.listening ?? false;
  }

  /** An ear on one run's events, for one stream. */
  open(tenantId: string, runId: string): RunEar {
    const key = runEventsHint(tenantId, runId);
    const ear: Ear = { rung: false, wake: undefined };
    let ears = this.#ears.get(key);
    if (ears === undefined) {
      ears = new Set();
      this.#ears.set(key, ears);
    }
    ears.add(ear);
    const watch = this.#listener?.watchRunEvents?.(tenantId, runId);
    // Once the watch is in place the stream reads once more: what was written between its first
    // read and the watch was not hinted.
    void watch?.ready.then(() => {
      ear.rung = true;
      ear.wake?.();
    });
    return {
      wait: (ms, signal) => {
        if (ear.rung || signal.aborted) {
          ear.rung = false;
          return Promise.resolve();
        }
        return new Promise<void>((resolve) => {
          const done = (): void => {
            clearTimeout(timer);
            signal.removeEventListener('abort', done);
            ear.wake = undefined;
            ear.rung = false;
            resolve();
          };
          const timer = setTimeout(done, ms);
          signal.addEventListener('abort', done, { once: true });
          ear.wake = done;
        });
      },
      close: () => {
        watch?.unwatch();
        const set = this.#ears.get(key);
        set?.delete(ear);
        if (set?.size === 0) this.#ears.delete(key);
        ear.wake?.();
      },
    };
  }

  /** Tells every stream of the run to read on. */
  ring(tenantId: string, runId: string): void {
    this.heard += 1;
    for (const ear of this.#ears.get(runEventsHint(tenantId, runId)) ?? []) {
      ear.rung = true;
      ear.wake?.();
    }
  }

  async close(): Promise<void> {
    const listener = this.#listener;
    this.#listener = undefined;
    await listener?.close();
  }
}
