import type { Redis, RedisOptions } from 'ioredis';
import type { Store, StoreTx, TransitionRequest, TransitionResult } from './store.js';
import { isWriteMethod } from './write-methods.js';
import {
  parseRunEventsHint,
  runEventsHint,
  WAKE_KINDS,
  type WakeKind,
  type WakeListener,
  type WakeListenOptions,
  type Wakeups,
} from './wakeups.js';

/** The channel wake-ups are published on. */
export const REDIS_WAKE_CHANNEL = 'oncely:wake';
/** The channel run-event hints are published on (tenant and run id, by the process that wrote them). */
export const REDIS_RUN_EVENTS_CHANNEL = 'oncely:run-events';

/** Reconnects: 0.1 s doubling to 5 s, forever until closed (ioredis resubscribes on its own). */
const retryStrategy = (times: number): number => Math.min(5_000, 100 * 2 ** Math.min(times, 6));

/** The publisher's: a publish while Redis is away fails at once instead of queueing (a wake-up is only speed). */
function publisherOptions(): RedisOptions {
  return { retryStrategy, maxRetriesPerRequest: 0, enableOfflineQueue: false, connectTimeout: 5_000 };
}

/** The subscriber's: its SUBSCRIBE waits for the connection, and is sent again after every reconnect. */
function subscriberOptions(): RedisOptions {
  return { retryStrategy, maxRetriesPerRequest: null, autoResubscribe: true, connectTimeout: 5_000 };
}

/**
 * Wake-ups over Redis pub/sub (`ONCELY_REDIS_URL`), for a store whose database does not carry them
 * (SQLite) or beside PostgreSQL's: the store's writes that queue a run or settle a call publish
 * after they commit (`publishingWakeups`), workers subscribe. Speed, never truth: a publish that
 * fails is dropped, a lost subscription reconnects with backoff, and polling finishes every run.
 */
export class RedisWakeups implements Wakeups {
  private constructor(
    private readonly url: string,
    private readonly publisher: Redis,
    private readonly RedisClass: typeof Redis,
  ) {}

  /** Connects the publishing client (ioredis is loaded here, not with the package). */
  static async open(url: string): Promise<RedisWakeups> {
    const { Redis } = await import('ioredis');
    const publisher = new Redis(url, publisherOptions());
    publisher.on('error', () => undefined); // reported by the listeners; a publish just fails
    return new RedisWakeups(url, publisher, Redis);
  }

  /** Publishes a wake-up; a Redis that is away drops it (polling covers it). */
  publish(kind: WakeKind): void {
    void this.publisher.publish(REDIS_WAKE_CHANNEL, kind).catch(() => undefined);
  }

  /** Publishes that a run's events were written; a Redis that is away drops it (streams read on). */
  publishRunEvents(tenantId: string, runId: string): void {
    void this.publisher
      .publish(REDIS_RUN_EVENTS_CHANNEL, runEventsHint(tenantId, runId))
      .catch(() => undefined);
  }

  listen(listen: WakeListenOptions): WakeListener {
    const subscriber = new this.RedisClass(this.url, subscriberOptions());
    let listening = false;
    let subscribed = false;
    let closed = false;
    const markListening = (): void => {
      if (closed || listening || !subscribed) return;
      listening = true;
      listen.onState?.('listening');
    };
    subscriber.on('message', (channel: string, message: string) => {
      if (channel === REDIS_WAKE_CHANNEL && WAKE_KINDS.includes(message as WakeKind)) {
        listen.onWake(message as WakeKind);
      } else if (channel === REDIS_RUN_EVENTS_CHANNEL) {
        const run = parseRunEventsHint(message);
        if (run !== undefined) listen.onRunEvents?.(run.tenantId, run.runId);
      }
    });
    // Subscribed again after every reconnect (ioredis re-sends SUBSCRIBE when it is ready).
    subscriber.on('ready', markListening);
    const lost = (error: unknown): void => {
      if (closed || !listening) return;
      listening = false;
      listen.onState?.('lost', error);
    };
    subscriber.on('error', lost);
    subscriber.on('close', () => lost(new Error('the Redis connection closed')));
    const channels =
      listen.onRunEvents === undefined
        ? [REDIS_WAKE_CHANNEL]
        : [REDIS_WAKE_CHANNEL, REDIS_RUN_EVENTS_CHANNEL];
    void subscriber.subscribe(...channels).then(
      () => {
        subscribed = true;
        markListening();
      },
      () => undefined, // closed before it was subscribed
    );
    return {
      get listening() {
        return listening;
      },
      close: async () => {
        closed = true;
        listening = false;
        subscriber.disconnect();
        await Promise.resolve();
      },
    };
  }

  async close(): Promise<void> {
    this.publisher.disconnect();
    await Promise.resolve();
  }
}

interface RunRef {
  readonly tenantId: string;
  readonly runId: string;
}

/** The run writes that write run events (each tells the run's event streams to read on). */
const RUN_EVENT_WRITES: ReadonlySet<string> = new Set([
  'create',
  'claimNext',
  'claim',
  'saveCheckpoint',
  'release',
  'retry',
  'requeue',
  'cancel',
  'appendEvent',
]);

const isRunRef = (value: unknown): value is RunRef =>
  typeof value === 'object' &&
  value !== null &&
  typeof (value as RunRef).tenantId === 'string' &&
  typeof (value as RunRef).runId === 'string';

/** The run a write was about: its answer's run, its request's (or its fence's), or (tenantId, runId). */
function runOf(args: readonly unknown[], result: unknown): RunRef | undefined {
  if (isRunRef(result)) return result;
  const created = (result as { run?: unknown } | undefined)?.run;
  if (isRunRef(created)) return created;
  const [first, second] = args;
  if (isRunRef(first)) return first;
  const fence = (first as { fence?: unknown } | undefined)?.fence;
  if (isRunRef(fence)) return fence;
  if (typeof first === 'string' && typeof second === 'string') return { tenantId: first, runId: second };
  return undefined;
}

/** What a transition tells a waiting run: a settled unknown call (from indeterminate, or by an operator or hook). */
function settlesWaiting(request: TransitionRequest, result: TransitionResult): boolean {
  return result.applied && (request.expect.status === 'indeterminate' || request.actor.kind !== 'runtime');
}

/**
 * The store with its wake-up writes published on Redis once they commit: a run queued (created,
 * released, requeued, retried) publishes `queued`; an unknown call settled or an approval decided
 * publishes `settled`. Everything else passes through; inside a transaction, what it wrote is
 * published after the commit.
 */
export function publishingWakeups(store: Store, redis: RedisWakeups): Store {
  const wrapTx = (
    tx: StoreTx,
    publish: (kind: WakeKind) => void,
    publishRun: (run: RunRef) => void,
  ): StoreTx => ({
    ledger: new Proxy(tx.ledger, {
      get(target, property, receiver) {
        const value: unknown = Reflect.get(target, property, receiver);
        if (property === 'transition') {
          return async (request: TransitionRequest) => {
            const result = await target.transition(request);
            if (settlesWaiting(request, result)) publish('settled');
            return result;
          };
        }
        if (property === 'transitions') {
          return async (requests: readonly TransitionRequest[]) => {
            const results = await target.transitions(requests);
            if (requests.some((r, i) => results[i] !== undefined && settlesWaiting(r, results[i])))
              publish('settled');
            return results;
          };
        }
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    }),
    runs: new Proxy(tx.runs, {
      get(target, property, receiver) {
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof value !== 'function') return value;
        const kind: WakeKind | undefined =
          property === 'create' || property === 'release' || property === 'requeue' || property === 'retry'
            ? 'queued'
            : property === 'decideApproval'
              ? 'settled'
              : undefined;
        const bound = (value as (...a: unknown[]) => Promise<unknown>).bind(target);
        if (typeof property !== 'string' || !isWriteMethod('runs', property)) return bound;
        return async (...args: unknown[]) => {
          const result = await bound(...args);
          const wrote = result !== undefined && result !== false;
          if (wrote && kind !== undefined) publish(kind);
          const run = wrote && RUN_EVENT_WRITES.has(property) ? runOf(args, result) : undefined;
          if (run !== undefined) publishRun(run);
          return result;
        };
      },
    }),
  });
  const direct = wrapTx(
    store,
    (kind) => redis.publish(kind),
    (run) => redis.publishRunEvents(run.tenantId, run.runId),
  );
  return {
    dialect: store.dialect,
    ledger: direct.ledger,
    runs: direct.runs,
    apiKeys: store.apiKeys,
    loopSteps: store.loopSteps,
    workers: store.workers,
    toolSlots: store.toolSlots,
    monitor: store.monitor,
    wakeups: redis,
    reserveStep: async (request) => {
      const result = await store.reserveStep(request);
      if (result !== undefined) redis.publishRunEvents(request.save.fence.tenantId, request.save.fence.runId);
      return result;
    },
    recordStep: async (request) => {
      const result = await store.recordStep(request);
      if (typeof result.version === 'number') {
        redis.publishRunEvents(request.save.fence.tenantId, request.save.fence.runId);
      }
      return result;
    },
    migrate: () => store.migrate(),
    schemaState: () => store.schemaState(),
    probe: () => store.probe(),
    transaction: async <T>(fn: (tx: StoreTx) => Promise<T>): Promise<T> => {
      const kinds = new Set<WakeKind>();
      const runs = new Map<string, RunRef>();
      const value = await store.transaction((tx) =>
        fn(
          wrapTx(
            tx,
            (kind) => kinds.add(kind),
            (run) => runs.set(runEventsHint(run.tenantId, run.runId), run),
          ),
        ),
      );
      for (const kind of kinds) redis.publish(kind);
      for (const run of runs.values()) redis.publishRunEvents(run.tenantId, run.runId);
      return value;
    },
    close: async () => {
      await redis.close();
      await store.close();
    },
  };
}
