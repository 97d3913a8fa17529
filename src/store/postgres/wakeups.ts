import pg from 'pg';
import {
  WAKE_KINDS,
  type WakeKind,
  type WakeListener,
  type WakeListenOptions,
  type Wakeups,
} from '../wakeups.js';

/** The channel the schema's triggers notify (migration 0010). */
export const WAKE_CHANNEL = 'oncely_wake';
const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 5_000;
const CONNECT_TIMEOUT_MS = 5_000;

/**
 * LISTEN on a connection of its own (never one of the store's pools: a listening connection must
 * stay checked out). When it is lost (the server restarted, the backend was terminated, the network
 * dropped) it is connected again with backoff (0.1 s doubling to 5 s, with jitter), forever until
 * closed; meanwhile nothing is heard and the worker's polling does the work.
 */
export class PostgresWakeups implements Wakeups {
  constructor(private readonly url: string) {}

  listen(options: WakeListenOptions): WakeListener {
    return new Listening(this.url, options);
  }
}

class Listening implements WakeListener {
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
    await this.#connecting;
    const client = this.#client;
    this.#client = undefined;
    this.#listening = false;
    if (client !== undefined) await client.end().catch(() => undefined);
  }

  async #connect(): Promise<void> {
    if (this.#closed) return;
    const client = new pg.Client({
      connectionString: this.url,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      keepAlive: true,
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
      if (message.channel !== WAKE_CHANNEL) return;
      const kind = message.payload as WakeKind | undefined;
      if (kind !== undefined && WAKE_KINDS.includes(kind)) this.options.onWake(kind);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${WAKE_CHANNEL}`);
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
