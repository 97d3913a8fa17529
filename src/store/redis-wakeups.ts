import type * as Ioredis from 'ioredis';
import type { Redis, RedisOptions } from 'ioredis';
import { loadOptional } from '../util/optional-package.js';
import type { TransitionRequest, TransitionResult } from './ledger-store.js';
import type { Store, StoreTx } from './store.js';
import type { ToolSlotStore } from './tool-slot-store.js';
import { isWriteMethod } from './write-methods.js';
import {
  runEventsHint,
  WAKE_KINDS,
  type RunEventWatch,
  type WakeKind,
  type WakeListener,
  type WakeListenOptions,
  type Wakeups,
} from './wakeups.js';

/** The channel wake-ups are published on. */
export const REDIS_WAKE_CHANNEL = 'oncely:wake';
/** The channel streamed model deltas are published on (every run's; a listener keeps its own). */
export const REDIS_DELTAS_CHANNEL = 'oncely:deltas';
/**
 * A run's event stream: a Redis stream per run (this prefix, then the tenant and run id joined by the
 * unit separator) that the process writing the run's events adds an entry to, after its write.
 */
export const REDIS_RUN_EVENTS_PREFIX = 'oncely:run-events:';
/** A run's stream keeps its newest entry (a reader only needs to know something came since it read). */
const RUN_STREAM_MAXLEN = 1;
/** And is gone this long after its run's last write (a reader away longer reads on its timer). */
const RUN_STREAM_TTL_MS = 10 * 60_000;
/** How long a read of the watched runs' streams blocks before it is sent again. */
const RUN_STREAM_BLOCK_MS = 2_000;

export function runStreamKey(tenantId: string, runId: string): string {
  return `${REDIS_RUN_EVENTS_PREFIX}${runEventsHint(tenantId, runId)}`;
}

/** Reconnects: 0.1 s doubling to 5 s, forever until closed (ioredis resubscribes on its own). */
const retryStrategy = (times: number): number => Math.min(5_000, 100 * 2 ** Math.min(times, 6));

/** The publisher's: a publish while Redis is away fails at once instead of queueing (a wake-up is only speed). */
function publisherOptions(): RedisOptions {
  return { retryStrategy, maxRetriesPerRequest: 0, enableOfflineQueue: false, connectTimeout: 5_000 };
}

/** The stream reader's: its reads wait for the connection while it reconnects. */
function readerOptions(): RedisOptions {
  return {
    retryStrategy,
    maxRetriesPerRequest: null,
    connectTimeout: 5_000,
    connectionName: 'oncely-run-events',
  };
}

/** The subscriber's: its SUBSCRIBE waits for the connection, and is sent again after every reconnect. */
function subscriberOptions(): RedisOptions {
  return { retryStrategy, maxRetriesPerRequest: null, autoResubscribe: true, connectTimeout: 5_000 };
}

/**
 * Wake-ups over Redis pub/sub (`ONCELY_REDIS_URL`), for a store whose database does not carry them
 * (SQLite) or beside PostgreSQL's: the store's writes that queue a run or settle a call publish
 * after they commit (`publishingWakeups`), workers subscribe. Run events go by a stream per run
 * instead (RunStreamReader), read only by the API processes streaming that run. Speed, never truth: a publish that
 * fails is dropped, a lost subscription reconnects with backoff, and polling finishes every run.
 */
export class RedisWakeups implements Wakeups {
  private constructor(
    private readonly url: string,
    private readonly publisher: Redis,
    private readonly RedisClass: typeof Redis,
  ) {}

  /** Connects the publishing client (ioredis, an optional peer dependency, is loaded here). */
  static async open(url: string): Promise<RedisWakeups> {
    const { Redis } = await loadIoredis('Redis wake-ups (ONCELY_REDIS_URL)');
    const publisher = new Redis(url, publisherOptions());
    publisher.on('error', () => undefined); // reported by the listeners; a publish just fails
    // Its first publishes would be dropped while it connects: wait for it, but not for a Redis that
    // is away (wake-ups are speed only; it reconnects with backoff).
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        publisher.off('ready', done);
        publisher.off('error', done);
        resolve();
      };
      const timer = setTimeout(done, 2_000);
      publisher.once('ready', done);
      publisher.once('error', done);
    });
    return new RedisWakeups(url, publisher, Redis);
  }

  /** Publishes a wake-up; a Redis that is away drops it (polling covers it). */
  publish(kind: WakeKind): void {
    void this.publisher.publish(REDIS_WAKE_CHANNEL, kind).catch(() => undefined);
  }

  /**
   * Adds to the run's event stream that its events were written (kept to the newest entry, expiring
   * with the run's quiet); a Redis that is away drops it (streams read on their timer).
   */
  publishRunEvents(tenantId: string, runId: string): void {
    const key = runStreamKey(tenantId, runId);
    void this.publisher
      .pipeline()
      .xadd(key, 'MAXLEN', RUN_STREAM_MAXLEN, '*', 'wrote', '1')
      .pexpire(key, RUN_STREAM_TTL_MS)
      .exec()
      .catch(() => undefined);
  }

  /** Publishes a batch of a run's streamed deltas; a Redis that is away drops it. */
  async publishDeltas(_tenantId: string, _runId: string, payload: string): Promise<void> {
    await this.publisher.publish(REDIS_DELTAS_CHANNEL, payload).catch(() => undefined);
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
      } else if (channel === REDIS_DELTAS_CHANNEL) {
        listen.onDeltas?.(message);
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
    const streams = listen.onRunEvents === undefined ? undefined : this.readRunStreams(listen.onRunEvents);
    const channels =
      listen.onDeltas === undefined ? [REDIS_WAKE_CHANNEL] : [REDIS_WAKE_CHANNEL, REDIS_DELTAS_CHANNEL];
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
      ...(streams === undefined
        ? {}
        : { watchRunEvents: (tenantId, runId) => streams.watch(tenantId, runId) }),
      close: async () => {
        closed = true;
        listening = false;
        subscriber.disconnect();
        await streams?.close();
      },
    };
  }

  /**
   * Reads the event streams of the runs this process streams (XREAD BLOCK on a connection of its
   * own), each from the last entry it read: a run written while the connection was away is heard
   * once it is back, and no other run's writes reach this process. A watch placed while a read
   * blocks wakes it (CLIENT UNBLOCK) so the new run is read at once.
   */
  private readRunStreams(onRunEvents: (tenantId: string, runId: string) => void): RunStreamReader {
    return new RunStreamReader(new this.RedisClass(this.url, readerOptions()), this.publisher, onRunEvents);
  }

  async close(): Promise<void> {
    this.publisher.disconnect();
    await Promise.resolve();
  }
}

interface Watched {
  readonly tenantId: string;
  readonly runId: string;
  /** Streams watching it (a run streamed twice is read once). */
  count: number;
  /** The last entry read (or the newest when the watch was placed). */
  lastId: string;
}

/** One API process's reads of its watched runs' streams (see RedisWakeups.readRunStreams). */
class RunStreamReader {
  private readonly watched = new Map<string, Watched>();
  private closed = false;
  /** The reader's connection id, for CLIENT UNBLOCK (read again after every reconnect). */
  private clientId: number | undefined;
  private idle: (() => void) | undefined;
  /** Moves on with every new watch; a read of an older one is woken to read the new run too. */
  private generation = 0;
  /** The generation of the read in flight, or undefined when none is. */
  private reading: number | undefined;
  private readonly loop: Promise<void>;

  constructor(
    private readonly reader: Redis,
    private readonly commands: Redis,
    private readonly onRunEvents: (tenantId: string, runId: string) => void,
  ) {
    reader.on('error', () => undefined); // reconnects with backoff; the loop waits for it
    reader.on('ready', () => {
      this.clientId = undefined;
    });
    this.loop = this.run();
  }

  watch(tenantId: string, runId: string): RunEventWatch {
    const key = runStreamKey(tenantId, runId);
    let done = false;
    const existing = this.watched.get(key);
    let ready: Promise<void>;
    if (existing !== undefined) {
      existing.count += 1;
      ready = Promise.resolve();
    } else {
      const entry: Watched = { tenantId, runId, count: 1, lastId: '0-0' };
      this.watched.set(key, entry);
      // From the newest entry now: what came before, the stream's first read of the store has.
      ready = this.commands
        .xrevrange(key, '+', '-', 'COUNT', 1)
        .then(
          (newest) => {
            const id = newest[0]?.[0];
            if (id !== undefined && entry.lastId === '0-0') entry.lastId = id;
          },
          () => undefined, // Redis away: read from the start once it is back (one extra read)
        )
        .then(() => this.wake());
    }
    return {
      ready,
      unwatch: () => {
        if (done) return;
        done = true;
        const entry = this.watched.get(key);
        if (entry !== undefined && --entry.count === 0) this.watched.delete(key);
      },
    };
  }

  /**
   * Wakes the loop: an idle one at once; a read of an older generation by CLIENT UNBLOCK, sent again
   * for a while if it reached the server before the read did.
   */
  private wake(): void {
    this.generation += 1;
    this.idle?.();
    void this.unblock();
  }

  private async unblock(): Promise<void> {
    for (let tryNo = 0; tryNo < 50; tryNo++) {
      const { reading, clientId } = this;
      if (this.closed || reading === undefined || reading === this.generation) return;
      if (clientId !== undefined) {
        const unblocked = await this.commands.client('UNBLOCK', clientId).catch(() => 0);
        if (unblocked === 1) return;
      }
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  private async run(): Promise<void> {
    while (!this.closed) {
      if (this.watched.size === 0) {
        await new Promise<void>((resolve) => (this.idle = resolve));
        this.idle = undefined;
        continue;
      }
      try {
        this.clientId ??= Number(await this.reader.client('ID'));
        const entries = [...this.watched.entries()];
        this.reading = this.generation;
        const answer = await this.reader.xread(
          'BLOCK',
          RUN_STREAM_BLOCK_MS,
          'STREAMS',
          ...entries.map(([key]) => key),
          ...entries.map(([, w]) => w.lastId),
        );
        this.reading = undefined;
        for (const [key, items] of answer ?? []) {
          const entry = this.watched.get(key);
          const last = items.at(-1)?.[0];
          if (entry === undefined || last === undefined) continue;
          entry.lastId = last;
          this.onRunEvents(entry.tenantId, entry.runId);
        }
      } catch {
        this.reading = undefined;
        if (this.closed) return;
        // Redis away or the read refused: the reader reconnects with backoff; try again shortly.
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.idle?.();
    this.reader.disconnect();
    await this.loop;
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
  'sendMessage',
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

/** Tool slots whose releases that free a slot now publish `slot`, after the release is written. */
function publishingReleases(slots: ToolSlotStore, redis: RedisWakeups): ToolSlotStore {
  return {
    acquire: (tool, limit, holder, leaseMs) => slots.acquire(tool, limit, holder, leaseMs),
    renew: (tool, slot, holder, leaseMs) => slots.renew(tool, slot, holder, leaseMs),
    release: async (tool, slot, holder, heldForMs) => {
      await slots.release(tool, slot, holder, heldForMs);
      if (heldForMs <= 0) redis.publish('slot');
    },
    held: (tool) => slots.held(tool),
  };
}

/**
 * The store with its wake-up writes published on Redis once they commit: a run queued (created,
 * released, requeued, retried) publishes `queued`; an unknown call settled or an approval decided
 * publishes `settled`; a tool slot freed publishes `slot`. Everything else passes through; inside a transaction, what it wrote is
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
    // A workflow's node runs are created through `runs` (published there); its own rows wake nobody.
    workflows: tx.workflows,
    runs: new Proxy(tx.runs, {
      get(target, property, receiver) {
        const value: unknown = Reflect.get(target, property, receiver);
        if (typeof value !== 'function') return value;
        const kind: WakeKind | undefined =
          property === 'create' ||
          property === 'release' ||
          property === 'requeue' ||
          property === 'retry' ||
          property === 'sendMessage'
            ? 'queued'
            : property === 'decideApproval'
              ? 'settled'
              : undefined;
        const bound = (value as (...a: unknown[]) => Promise<unknown>).bind(target);
        if (typeof property !== 'string' || !isWriteMethod('runs', property)) return bound;
        return async (...args: unknown[]) => {
          const result = await bound(...args);
          const wrote =
            result !== undefined &&
            result !== false &&
            (property !== 'sendMessage' || (result as { kind?: string }).kind === 'sent');
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
    workflows: direct.workflows,
    workers: store.workers,
    toolSlots: publishingReleases(store.toolSlots, redis),
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

/** ioredis, an optional peer dependency; a clear `PACKAGE_MISSING` when it is not installed. */
export function loadIoredis(neededBy: string): Promise<typeof Ioredis> {
  return loadOptional({ name: 'ioredis', neededBy, install: 'ioredis@5' }, () => import('ioredis'));
}
