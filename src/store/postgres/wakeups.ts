import { randomUUID } from 'node:crypto';
import pg from 'pg';
import {
  parseRunEventsHint,
  runEventsHint,
  WAKE_KINDS,
  type RunEventWatch,
  type WakeKind,
  type WakeListener,
  type WakeListenOptions,
  type Wakeups,
} from '../wakeups.js';

/** The channel the schema's triggers notify (migration 0010). */
export const WAKE_CHANNEL = 'oncely_wake';
/** The listening connections' application_name. */
export const WAKEUPS_APPLICATION_NAME = 'oncely wake-ups';
/** The channel run-event writes notify (migration 0011), listened to only when asked. */
export const RUN_EVENTS_CHANNEL = 'oncely_run_events';
/** The channel streamed model deltas are sent on, for watched runs only; listened to only when asked. */
export const DELTAS_CHANNEL = 'oncely_deltas';
/** A batch of deltas notified only when some API process watches the run (as run events are). */
const NOTIFY_DELTAS = `SELECT pg_notify('${DELTAS_CHANNEL}', $3) FROM run_event_watches
WHERE tenant_id = $1 AND run_id = $2 AND expires_at > now() LIMIT 1`;
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 5_000;
const CONNECT_TIMEOUT_MS = 5_000;
/** A watch lives this long unless renewed (every third of it): a server gone stops being told. */
const WATCH_TTL_MS = 60_000;

const WATCH = `INSERT INTO run_event_watches (tenant_id, run_id, watcher, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4::double precision / 1000))
ON CONFLICT (tenant_id, run_id, watcher) DO UPDATE SET expires_at = EXCLUDED.expires_at`;
const UNWATCH = 'DELETE FROM run_event_watches WHERE tenant_id = $1 AND run_id = $2 AND watcher = $3';
/** Renews this listener's watches, and forgets those of listeners long gone. */
const RENEW = `WITH renewed AS (
  UPDATE run_event_watches SET expires_at = now() + make_interval(secs => $2::double precision / 1000)
  WHERE watcher = $1
)
DELETE FROM run_event_watches WHERE expires_at < now() - interval '1 hour'`;
const UNWATCH_ALL = 'DELETE FROM run_event_watches WHERE watcher = $1';

/**
 * LISTEN on a connection of its own (never one of the store's pools: a listening connection must
 * stay checked out). When it is lost (the server restarted, the backend was terminated, the network
 * dropped) it is connected again with backoff (0.1 s doubling to 5 s, with jitter), forever until
 * closed; meanwhile nothing is heard and the worker's polling does the work.
 */
export class PostgresWakeups implements Wakeups {
  /** `query` sends a statement on one of the store's pools (for the deltas' NOTIFY). */
  constructor(
    private readonly url: string,
    private readonly query?: (text: string, params: unknown[]) => Promise<unknown>,
  ) {}

  listen(options: WakeListenOptions): WakeListener {
    return new Listening(this.url, options);
  }

  async publishDeltas(tenantId: string, runId: string, payload: string): Promise<void> {
    await this.query?.(NOTIFY_DELTAS, [tenantId, runId, payload]).catch(() => undefined);
  }
}

class Listening implements WakeListener {
  /** This listener's name in run_event_watches. */
  readonly #watcher = randomUUID();
  /** The runs watched, with how many streams watch each. */
  readonly #watches = new Map<string, { tenantId: string; runId: string; streams: number }>();
  #renewal: NodeJS.Timeout | undefined;
  #client: pg.Client | undefined;
  #closed = false;
  #listening = false;
  #retryMs = FIRST_RETRY_MS;
  #timer: NodeJS.Timeout | undefined;
  #connecting: Promise<void> = Promise.resolve();

  constructor(
    private readonly url: string,
    private readonly options: WakeListenOptions,
  ) {
    this.#connecting = this.#connect();
  }

  get listening(): boolean {
    return this.#listening;
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    clearInterval(this.#renewal);
    await this.#connecting;
    const client = this.#client;
    this.#client = undefined;
    this.#listening = false;
    if (client === undefined) return;
    if (this.#watches.size > 0) await client.query(UNWATCH_ALL, [this.#watcher]).catch(() => undefined);
    await client.end().catch(() => undefined);
  }

  watchRunEvents(tenantId: string, runId: string): RunEventWatch {
    const key = runEventsHint(tenantId, runId);
    const held = this.#watches.get(key);
    let ready: Promise<void> = Promise.resolve();
    if (held !== undefined) held.streams += 1;
    else {
      this.#watches.set(key, { tenantId, runId, streams: 1 });
      ready = this.#connecting.then(() => this.#place(tenantId, runId));
      if (this.#renewal === undefined) {
        this.#renewal = setInterval(() => {
          if (this.#watches.size > 0) {
            void this.#client?.query(RENEW, [this.#watcher, WATCH_TTL_MS]).catch(() => undefined);
          }
        }, WATCH_TTL_MS / 3);
        this.#renewal.unref();
      }
    }
    let ended = false;
    return {
      ready,
      unwatch: () => {
        if (ended) return;
        ended = true;
        const watch = this.#watches.get(key);
        if (watch === undefined || --watch.streams > 0) return;
        this.#watches.delete(key);
        void this.#client?.query(UNWATCH, [tenantId, runId, this.#watcher]).catch(() => undefined);
      },
    };
  }

  /** Puts one watch in place on the listening connection, if it is up (a reconnect places them all). */
  async #place(tenantId: string, runId: string): Promise<void> {
    await this.#client?.query(WATCH, [tenantId, runId, this.#watcher, WATCH_TTL_MS]).catch(() => undefined);
  }

  async #connect(): Promise<void> {
    if (this.#closed) return;
    const client = new pg.Client({
      connectionString: this.url,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      keepAlive: true,
      // Named, so an operator (or a test) can find the listening connections in pg_stat_activity.
      application_name: WAKEUPS_APPLICATION_NAME,
    });
    let lost = false;
    const onLost = (error: unknown): void => {
      if (lost) return;
      lost = true;
      if (this.#client === client) this.#client = undefined;
      const was = this.#listening;
      this.#listening = false;
      void client.end().catch(() => undefined);
      if (this.#closed) return;
      if (was) this.options.onState?.('lost', error);
      this.#retry();
    };
    client.on('error', onLost);
    client.on('end', () => onLost(new Error('the listening connection ended')));
    client.on('notification', (message) => {
      if (message.channel === DELTAS_CHANNEL) {
        if (message.payload !== undefined) this.options.onDeltas?.(message.payload);
        return;
      }
      if (message.channel === RUN_EVENTS_CHANNEL) {
        const run = parseRunEventsHint(message.payload ?? '');
        if (run !== undefined) this.options.onRunEvents?.(run.tenantId, run.runId);
        return;
      }
      if (message.channel !== WAKE_CHANNEL) return;
      const kind = message.payload as WakeKind | undefined;
      if (kind !== undefined && WAKE_KINDS.includes(kind)) this.options.onWake(kind);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${WAKE_CHANNEL}`);
      if (this.options.onRunEvents !== undefined) await client.query(`LISTEN ${RUN_EVENTS_CHANNEL}`);
      if (this.options.onDeltas !== undefined) await client.query(`LISTEN ${DELTAS_CHANNEL}`);
    } catch (error) {
      onLost(error);
      return;
    }
    if (this.#closed || lost) {
      await client.end().catch(() => undefined);
      return;
    }
    this.#client = client;
    this.#listening = true;
    this.#retryMs = FIRST_RETRY_MS;
    // Watches placed while the connection was away (or lost with it) are placed again.
    for (const watch of this.#watches.values()) await this.#place(watch.tenantId, watch.runId);
    this.options.onState?.('listening');
  }

  #retry(): void {
    const delay = this.#retryMs * (0.5 + Math.random() / 2);
    this.#retryMs = Math.min(MAX_RETRY_MS, this.#retryMs * 2);
    this.#timer = setTimeout(() => {
      this.#connecting = this.#connect();
    }, delay);
    this.#timer.unref();
  }
}
