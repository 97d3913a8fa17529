import type { ModelDelta } from '../models/index.js';
import type { Clock, ClockTimer } from '../util/clock.js';

/*
 * The deltas of a streamed model response, on their way to whoever streams the run's events: at once
 * to this process's listeners (an API server that drives runs itself), and in small batches to other
 * processes through the store's wake-ups (PostgreSQL NOTIFY to the API processes watching the run, or
 * Redis pub/sub). Speed, never truth: a delta lost on the way is only a gap in a live view; the run's
 * events carry the whole response once it is durable.
 */

/** A delta with its number within its stream (1, 2, 3…). */
export type NumberedDelta = ModelDelta & { readonly seq: number };

/**
 * Deltas of one streamed model call of a run. `epoch` (the lease epoch of the process streaming)
 * and `stream` (the model calls it streamed in this drive, and each retry of a call) name the stream:
 * a new name for a step whose deltas were already told means the model is being asked again.
 */
export interface DeltaBatch {
  readonly tenantId: string;
  readonly runId: string;
  readonly step: number;
  readonly epoch: number;
  readonly stream: number;
  readonly deltas: readonly NumberedDelta[];
}

/** A batch that crosses processes is kept under this many bytes of JSON (NOTIFY allows 8000). */
export const MAX_BATCH_BYTES = 6_000;
/** How long deltas wait to be sent to other processes together. */
export const BATCH_MS = 25;

/** This process's listeners of streamed deltas. */
export class DeltaBus {
  readonly #listeners = new Set<(batch: DeltaBatch) => void>();

  /** Listens to every delta this process streams; returns the unsubscribe. */
  listen(listener: (batch: DeltaBatch) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  get listened(): boolean {
    return this.#listeners.size > 0;
  }

  tell(batch: DeltaBatch): void {
    for (const listener of this.#listeners) {
      try {
        listener(batch);
      } catch {
        // A listener's failure is not the run's.
      }
    }
  }
}

/** Sends one batch (JSON) to other processes; resolves when it is sent or dropped. */
export type PublishDeltas = (tenantId: string, runId: string, payload: string) => Promise<void>;

/** What names a model call's stream but its number: the run, the step and the driver's epoch. */
export type StreamOf = Omit<DeltaBatch, 'deltas' | 'stream'>;

/**
 * The deltas of one step's model call: each told at once to this process's bus, and sent to other
 * processes in batches every few milliseconds, one send at a time so they arrive in order. Each
 * `start` (a try of the call: a retry begins again) opens a stream of its own, numbered by
 * `nextStream`, its deltas numbered from 1.
 */
export class DeltaPublisher {
  readonly #bus: DeltaBus | undefined;
  readonly #publish: PublishDeltas | undefined;
  readonly #step: StreamOf;
  readonly #nextStream: () => number;
  readonly #clock: Clock;
  #stream = 0;
  #seq = 0;
  #pending: NumberedDelta[] = [];
  #pendingBytes = 0;
  #timer: ClockTimer | undefined;
  #sending: Promise<void> = Promise.resolve();

  constructor(
    bus: DeltaBus | undefined,
    publish: PublishDeltas | undefined,
    step: StreamOf,
    nextStream: () => number,
    clock: Clock,
  ) {
    this.#bus = bus;
    this.#publish = publish;
    this.#step = step;
    this.#nextStream = nextStream;
    this.#clock = clock;
  }

  add(delta: ModelDelta): void {
    if (delta.type === 'start' || this.#stream === 0) {
      this.#flush(); // the last try's deltas go under its own name
      this.#stream = this.#nextStream();
      this.#seq = 0;
    }
    const numbered: NumberedDelta = { ...delta, seq: ++this.#seq };
    if (this.#bus?.listened === true) this.#bus.tell(this.#batch([numbered]));
    if (this.#publish === undefined) return;
    const bytes = JSON.stringify(numbered).length + 1;
    if (this.#pendingBytes + bytes > MAX_BATCH_BYTES) this.#flush();
    this.#pending.push(numbered);
    this.#pendingBytes += bytes;
    if (delta.type === 'start' || delta.type === 'finish') this.#flush();
    else this.#timer ??= this.#clock.setTimeout(() => this.#flush(), BATCH_MS);
  }

  /** Sends what is left and waits for every send (each already ends on its own; a failure is dropped). */
  async close(): Promise<void> {
    this.#flush();
    await this.#sending;
  }

  #batch(deltas: readonly NumberedDelta[]): DeltaBatch {
    return { ...this.#step, stream: this.#stream, deltas };
  }

  #flush(): void {
    this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    const publish = this.#publish;
    if (publish === undefined || this.#pending.length === 0) return;
    const payload = JSON.stringify(this.#batch(this.#pending));
    this.#pending = [];
    this.#pendingBytes = 0;
    const { tenantId, runId } = this.#step;
    this.#sending = this.#sending.then(() => publish(tenantId, runId, payload).catch(() => undefined));
  }
}

/** A batch received from another process, checked; undefined when it is not one. */
export function parseDeltaBatch(payload: string): DeltaBatch | undefined {
  try {
    const batch = JSON.parse(payload) as Partial<DeltaBatch>;
    if (
      typeof batch.tenantId === 'string' &&
      typeof batch.runId === 'string' &&
      Number.isInteger(batch.step) &&
      Number.isInteger(batch.epoch) &&
      Number.isInteger(batch.stream) &&
      Array.isArray(batch.deltas) &&
      batch.deltas.every(
        (d: Partial<NumberedDelta> | null) => typeof d?.type === 'string' && Number.isInteger(d.seq),
      )
    ) {
      return batch as DeltaBatch;
    }
  } catch {
    // not a batch
  }
  return undefined;
}
