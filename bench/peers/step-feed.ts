/**
 * Hands operations to a long-running workflow (or graph) in this process, one step at a time. The
 * bench's `op(i)` pushes a request and waits; the workflow pulls it, runs its durable step(s), and
 * marks it done only once the peer has checkpointed. The handoff is in memory (microseconds), so
 * an op times the peer's step and its checkpoint, not a durable message of ours.
 */
export interface StepRequest {
  readonly n: number;
  done(): void;
  fail(error: unknown): void;
}

type Waiter = (request: StepRequest | null) => void;

export class StepFeed {
  readonly #limit: number;
  readonly #queued: (StepRequest | null)[] = [];
  #waiter: Waiter | undefined;
  #pushed = 0;
  #closed: Error | undefined;

  /** `limit` bounds the steps one feed ever hands out (the consumer's loop bound). */
  constructor(limit: number) {
    this.#limit = limit;
  }

  get limit(): number {
    return this.#limit;
  }

  /** Resolves when the consumer has finished (and checkpointed) the step for `n`. */
  push(n: number): Promise<void> {
    if (this.#closed) return Promise.reject(this.#closed);
    if (this.#pushed >= this.#limit) {
      return Promise.reject(new Error(`step feed is bounded to ${this.#limit} steps`));
    }
    this.#pushed += 1;
    return new Promise<void>((resolve, reject) => {
      this.#deliver({ n, done: resolve, fail: reject });
    });
  }

  /** Tells the consumer to finish after the requests already pushed. */
  stop(): void {
    this.#deliver(null);
  }

  /** Fails every waiting and future push: the consumer is gone. */
  abort(error: unknown): void {
    this.#closed = error instanceof Error ? error : new Error(String(error));
    for (const request of this.#queued.splice(0)) request?.fail(this.#closed);
  }

  /** The next request, or `null` once stopped. */
  next(): Promise<StepRequest | null> {
    const queued = this.#queued.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    return new Promise<StepRequest | null>((resolve) => {
      this.#waiter = resolve;
    });
  }

  #deliver(request: StepRequest | null): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    if (waiter) waiter(request);
    else this.#queued.push(request);
  }
}

/** The no-op side effect every peer case runs: no I/O, returns `{ n }`. */
export function noopEffect(n: number): Promise<{ n: number }> {
  return Promise.resolve({ n });
}

/**
 * Ops per case per round. BENCH_PEER_OPS (default 300) counts durable steps; a case whose op is
 * several steps (a fan-out of 16, a run of 3) gets that many fewer ops, so every case checkpoints
 * about the same number of steps and a round of one stays at a few seconds.
 */
export function peerOps(stepsPerOp = 1): number {
  const steps = Number(process.env.BENCH_PEER_OPS ?? 300);
  if (!Number.isInteger(steps) || steps < 1) {
    throw new Error(`BENCH_PEER_OPS must be a positive integer, got ${process.env.BENCH_PEER_OPS}`);
  }
  return Math.max(1, Math.ceil(steps / stepsPerOp));
}
