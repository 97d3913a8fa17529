import type { WakeListener, Wakeups } from '../store/wakeups.js';
import { runEventsHint } from '../store/wakeups.js';
import { parseDeltaBatch, type DeltaBatch, type DeltaBus } from '../runs/stream-deltas.js';

/** Deltas an ear holds for its stream at most (past it, the oldest are dropped: a live view's gap). */
const MAX_HELD_DELTAS = 10_000;

/** One event stream's ear on its run: rung when another process wrote the run's events. */
export interface RunEar {
  /**
   * Resolves when the run's events were rung since the last wait (at once, if they were while the
   * stream was reading; also once when the run's watch is in place) — `events`; when streamed deltas
   * are waiting to be taken — `deltas`; after `ms`, or when `signal` aborts — `timeout`; whichever
   * comes first.
   */
  wait(ms: number, signal: AbortSignal): Promise<'events' | 'deltas' | 'timeout'>;
  /** The streamed deltas of the run heard since the last take, in the order heard. */
  takeDeltas(): DeltaBatch[];
  /** Stops listening for this stream. */
  close(): void;
}

interface Ear {
  rung: boolean;
  wake: (() => void) | undefined;
  deltas: DeltaBatch[];
  held: number;
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

  readonly #unlisten: (() => void) | undefined;

  /**
   * `deltas`: this process's own streamed deltas (a server that drives runs itself); other processes'
   * come through the wake-ups.
   */
  constructor(wakeups: Wakeups | undefined, deltas?: DeltaBus) {
    this.#listener = wakeups?.listen({
      onWake: () => undefined,
      onRunEvents: (tenantId, runId) => this.ring(tenantId, runId),
      onDeltas: (payload) => {
        const batch = parseDeltaBatch(payload);
        if (batch !== undefined) this.hear(batch);
      },
    });
    this.#unlisten = deltas?.listen((batch) => this.hear(batch));
  }

  /** Hands a batch of streamed deltas to every stream of its run, and wakes them. */
  hear(batch: DeltaBatch): void {
    for (const ear of this.#ears.get(runEventsHint(batch.tenantId, batch.runId)) ?? []) {
      ear.deltas.push(batch);
      ear.held += batch.deltas.length;
      while (ear.held > MAX_HELD_DELTAS && ear.deltas.length > 1)
        ear.held -= ear.deltas.shift()!.deltas.length;
      ear.rung = true;
      ear.wake?.();
    }
  }

  /** True while hints can be heard (the listening connection is up). */
  get listening(): boolean {
    return this.#listener?.listening ?? false;
  }

  /** An ear on one run's events, for one stream. */
  open(tenantId: string, runId: string): RunEar {
    const key = runEventsHint(tenantId, runId);
    const ear: Ear = { rung: false, wake: undefined, deltas: [], held: 0 };
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
        const why = (): 'events' | 'deltas' | undefined =>
          ear.rung ? 'events' : ear.deltas.length > 0 ? 'deltas' : undefined;
        const now = why();
        if (now !== undefined || signal.aborted) {
          ear.rung = false;
          return Promise.resolve(now ?? 'timeout');
        }
        return new Promise((resolve) => {
          const done = (): void => {
            clearTimeout(timer);
            signal.removeEventListener('abort', done);
            ear.wake = undefined;
            const reason = why() ?? 'timeout';
            ear.rung = false;
            resolve(reason);
          };
          const timer = setTimeout(done, ms);
          signal.addEventListener('abort', done, { once: true });
          ear.wake = done;
        });
      },
      takeDeltas: () => {
        const taken = ear.deltas;
        ear.deltas = [];
        ear.held = 0;
        return taken;
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
    this.#unlisten?.();
    const listener = this.#listener;
    this.#listener = undefined;
    await listener?.close();
  }
}
