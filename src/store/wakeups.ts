/**
 * Wake-ups between processes: a hint that something may be ready now, carried where the database can
 * (PostgreSQL's LISTEN/NOTIFY). Speed, never truth: a worker that hears nothing still polls, and a
 * lost connection is only slower until it is back.
 */
export type WakeKind =
  /** A run was queued (created, released, requeued, retried): a worker may claim it now. */
  | 'queued'
  /** An unknown call was settled or an approval decided: a waiting run may go on (sweep now). */
  | 'settled'
  /** A slot of a limited tool was freed: a call waiting for one may take it now. */
  | 'slot';

/** A listener's watch on one run's events (see `WakeListener.watchRunEvents`). */
export interface RunEventWatch {
  /** Settles once the watch is in place (or could not be placed: hints are speed only). */
  readonly ready: Promise<void>;
  /** Ends this watch. */
  unwatch(): void;
}

export interface WakeListener {
  /** True while the listening connection is up. */
  readonly listening: boolean;
  /**
   * Asks for one run's hints (present where a listener hears only the runs it watches: PostgreSQL,
   * whose trigger notifies watched runs only, as a NOTIFY would serialize every step's commit; Redis,
   * whose reader reads the watched runs' streams).
   */
  watchRunEvents?(tenantId: string, runId: string): RunEventWatch;
  /** Stops listening and closes the connection. */
  close(): Promise<void>;
}

export interface WakeListenOptions {
  readonly onWake: (kind: WakeKind) => void;
  /**
   * Told when events were written for a watched run (on PostgreSQL by a trigger, on commit; over
   * Redis by an entry the writing process adds to the run's stream, after it). Heard only by a
   * listener that asks (an API process streaming run events), so workers are not told of every step.
   * Speed, never truth: a stream still reads on.
   */
  readonly onRunEvents?: (tenantId: string, runId: string) => void;
  /**
   * Told of each batch of streamed model deltas another process published (JSON, as it was sent), for
   * the runs this listener watches (PostgreSQL sends only watched runs'; Redis sends all, and the
   * listener keeps its own). Heard only by a listener that asks.
   */
  readonly onDeltas?: (payload: string) => void;
  /** Told when the connection is lost (with why) and when it listens again. */
  readonly onState?: (state: 'listening' | 'lost', error?: unknown) => void;
}

export interface Wakeups {
  /** Listens on a connection of its own, reconnecting with backoff when it is lost. */
  listen(options: WakeListenOptions): WakeListener;
  /**
   * Publishes a batch of a run's streamed model deltas (JSON, at most a few kilobytes) to the
   * processes streaming its events; resolves once sent, or dropped (nobody watching, the connection
   * away): speed, never truth.
   */
  publishDeltas?(tenantId: string, runId: string, payload: string): Promise<void>;
}

export const WAKE_KINDS: readonly WakeKind[] = ['queued', 'settled', 'slot'];

/** A run's key in a run-events hint: tenant and run id, joined by the unit separator. */
export const RUN_EVENTS_SEPARATOR = '\u001f';

export function runEventsHint(tenantId: string, runId: string): string {
  return `${tenantId}${RUN_EVENTS_SEPARATOR}${runId}`;
}

/** The tenant and run of a hint, or undefined for one that is not. */
export function parseRunEventsHint(hint: string): { tenantId: string; runId: string } | undefined {
  const at = hint.indexOf(RUN_EVENTS_SEPARATOR);
  if (at <= 0 || at === hint.length - 1) return undefined;
  return { tenantId: hint.slice(0, at), runId: hint.slice(at + 1) };
}
