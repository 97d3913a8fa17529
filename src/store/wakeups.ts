/**
 * Wake-ups between processes: a hint that something may be ready now, carried where the database can
 * (PostgreSQL's LISTEN/NOTIFY). Speed, never truth: a worker that hears nothing still polls, and a
 * lost connection is only slower until it is back.
 */
export type WakeKind =
  /** A run was queued (created, released, requeued, retried): a worker may claim it now. */
  | 'queued'
  /** An unknown call was settled or an approval decided: a waiting run may go on (sweep now). */
  | 'settled';

export interface WakeListener {
  /** True while the listening connection is up. */
  readonly listening: boolean;
  /** Stops listening and closes the connection. */
  close(): Promise<void>;
}

export interface WakeListenOptions {
  readonly onWake: (kind: WakeKind) => void;
  /** Told when the connection is lost (with why) and when it listens again. */
  readonly onState?: (state: 'listening' | 'lost', error?: unknown) => void;
}

export interface Wakeups {
  /** Listens on a connection of its own, reconnecting with backoff when it is lost. */
  listen(options: WakeListenOptions): WakeListener;
}

export const WAKE_KINDS: readonly WakeKind[] = ['queued', 'settled'];
