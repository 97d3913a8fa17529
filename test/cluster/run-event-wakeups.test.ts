import { Redis } from 'ioredis';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { buildApiServer, createApiKey } from '../../src/api/index.js';
import type { ApiApp } from '../../src/api/context.js';
import {
  defineAgent,
  defineTool,
  openRuntime,
  openStore,
  scriptedModel,
  write,
  type Runtime,
  type Store,
} from '../../src/index.js';
import { RedisWakeups, publishingWakeups } from '../../src/store/redis-wakeups.js';
import { waitFor } from '../support/processes.js';
import { redisUrlOrSkip } from '../support/redis.js';
import { openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * Run events reach an API process's event streams (SSE) as soon as another process writes them: the
 * API's streams poll only once a minute here, so a stream that ends within seconds of a run finishing
 * in another runtime (its own store, its own connections, as another process's would be) was woken
 * by the hint (LISTEN/NOTIFY on PostgreSQL; the run's Redis stream with ONCELY_REDIS_URL, here for SQLite).
 * Without hints the same stream is still waiting; with its LISTEN connection terminated, the stream
 * of the next run is woken again once it reconnects.
 */

const POLL_MS = 60_000;
const WOKEN_WITHIN_MS = 10_000;
const TENANT = 'acme';
const redisUrl = await redisUrlOrSkip();

interface Side {
  readonly runtime: Runtime;
  readonly store: Store;
}

const note = defineTool({
  name: 'note',
  description: 'Write a note',
  input: z.object({ text: z.string() }),
  effect: write(),
  execute: () => ({ ok: true }),
});
const agent = defineAgent({
  name: 'noter',
  instructions: 'Write one note.',
  model: scriptedModel([{ toolCalls: [{ toolName: 'note', input: { text: 'hi' } }] }, { text: 'Noted.' }]),
  tools: [note],
});

/** The store with no wake-ups of its own: its streams can only poll. */
function deaf(store: Store): Store {
  return new Proxy(store, {
    get: (target, property, receiver) =>
      property === 'wakeups' ? undefined : (Reflect.get(target, property, receiver) as unknown),
  });
}

/** Reads a stream to its end; resolves with the event names and when it ended. */
async function readToEnd(response: Response): Promise<{ names: string[]; endedAt: number }> {
  const names: string[] = [];
  const text = response.body!.pipeThrough(new TextDecoderStream());
  let buffer = '';
  for await (const chunk of text) {
    buffer += chunk;
    for (const match of buffer.matchAll(/^event: (.+)$/gm)) names.push(match[1]!);
    for (const match of buffer.matchAll(/^data: .*"status":"(\w+)"/gm)) names.push(`status:${match[1]}`);
    buffer = buffer.slice(buffer.lastIndexOf('\n') + 1);
  }
  return { names, endedAt: Date.now() };
}

/** Waits until one connection of the database listens for run-event hints. */
async function listeningOn(url: string): Promise<void> {
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    await waitFor(
      'the API server to LISTEN oncely_run_events',
      async () => {
        const { rows } = await admin.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE datname = current_database() AND application_name = 'oncely wake-ups'`,
        );
        return rows[0]?.n === 1 ? true : undefined;
      },
      10_000,
      20,
    );
  } finally {
    await admin.end();
  }
}

describe('run events wake API streams across processes', () => {
  const closers: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const close of closers.reverse()) await close();
    closers.length = 0;
  });

  async function sides(
    apiStore: Store,
    driverStore: Store,
  ): Promise<{ api: Side; driver: Side; base: string; key: string; app: ApiApp }> {
    const api = {
      store: apiStore,
      runtime: await openRuntime({ store: apiStore, agents: [agent], owner: 'api' }),
    };
    const driver = {
      store: driverStore,
      runtime: await openRuntime({ store: driverStore, agents: [agent], owner: 'driver' }),
    };
    const app = await buildApiServer({ runtime: api.runtime, eventPollMs: POLL_MS });
    const address = await app.listen({ host: '127.0.0.1', port: 0 });
    closers.push(async () => {
      await app.close();
      await api.runtime.close();
      await driver.runtime.close();
    });
    const { key } = await createApiKey(apiStore.apiKeys, {
      tenantId: TENANT,
      actorId: 'watcher',
      role: 'viewer',
    });
    return { api, driver, base: address, key, app };
  }

  /** Starts a run through the API's runtime, streams it, drives it in the other: how long the stream took to end after. */
  async function streamWhileDriven(
    s: { api: Side; driver: Side; base: string; key: string },
    runId: string,
    giveUpMs: number,
  ): Promise<{ names: string[]; lagMs: number | undefined }> {
    await s.api.runtime.startRun({ tenantId: TENANT, agent: 'noter', input: 'go', runId });
    const stop = new AbortController();
    const response = await fetch(`${s.base}/v1/runs/${runId}/events`, {
      headers: { authorization: `Bearer ${s.key}` },
      signal: stop.signal,
    });
    expect(response.status).toBe(200);
    const reading = readToEnd(response).catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 300)); // the stream has read what there was, and waits
    expect((await s.driver.runtime.drive(TENANT, runId)).status).toBe('completed');
    const drivenAt = Date.now();
    const timer = setTimeout(() => stop.abort(), giveUpMs);
    const read = await reading;
    clearTimeout(timer);
    if (read === undefined) return { names: [], lagMs: undefined };
    return { names: read.names, lagMs: read.endedAt - drivenAt };
  }

  it('on postgres, LISTEN/NOTIFY: the stream reads on at once, and again after its connection is terminated', async () => {
    const opened: OpenedStore = await openTestStore('postgres', 'run_event_wakeups');
    closers.push(() => opened.cleanup());
    const driverStore = await openStore(opened.url);
    closers.push(() => driverStore.close());
    const s = await sides(opened.store, driverStore);
    await listeningOn(opened.url);
    const first = await streamWhileDriven(s, 'run_heard_1', WOKEN_WITHIN_MS);
    expect(first.lagMs).toBeDefined();
    expect(first.lagMs!).toBeLessThan(WOKEN_WITHIN_MS);
    expect(first.names).toContain('status:completed');

    const admin = new pg.Client({ connectionString: opened.url });
    await admin.connect();
    try {
      // The stream's watch is gone with it; a run nobody streams sends no NOTIFY for its steps.
      await waitFor(
        'the ended stream to unwatch its run',
        async () => {
          const { rows } = await admin.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM run_event_watches',
          );
          return rows[0]?.n === 0 ? true : undefined;
        },
        5_000,
        20,
      );
      const told: string[] = [];
      admin.on('notification', (message) => told.push(message.payload ?? ''));
      await admin.query('LISTEN oncely_run_events');
      await s.api.runtime.startRun({ tenantId: TENANT, agent: 'noter', input: 'go', runId: 'run_unwatched' });
      expect((await s.driver.runtime.drive(TENANT, 'run_unwatched')).status).toBe('completed');
      await admin.query('SELECT 1'); // notifications sent before this answer have arrived
      expect(told).toEqual([]);
      await admin.query('UNLISTEN oncely_run_events');

      const { rows } = await admin.query<{ n: number }>(
        `SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'oncely wake-ups'`,
      );
      expect(rows[0]?.n).toBe(1);
    } finally {
      await admin.end();
    }
    // Listening again (with backoff) before the next stream is opened.
    await listeningOn(opened.url);
    const second = await streamWhileDriven(s, 'run_heard_2', WOKEN_WITHIN_MS);
    expect(second.lagMs).toBeDefined();
    expect(second.lagMs!).toBeLessThan(WOKEN_WITHIN_MS);
    expect(second.names).toContain('status:completed');
  });

  it('without hints, the same stream waits for its poll (so the test above can fail)', async () => {
    const opened: OpenedStore = await openTestStore('postgres', 'run_event_deaf');
    closers.push(() => opened.cleanup());
    const driverStore = await openStore(opened.url);
    closers.push(() => driverStore.close());
    const s = await sides(deaf(opened.store), driverStore);
    const unheard = await streamWhileDriven(s, 'run_unheard', 3_000);
    expect(unheard.lagMs).toBeUndefined();
  });

  it.skipIf(redisUrl === undefined)('on sqlite with Redis streams: the stream reads on at once', async () => {
    const opened: OpenedStore = await openTestStore('sqlite', 'run_event_redis');
    closers.push(() => opened.cleanup());
    const apiRedis = await RedisWakeups.open(redisUrl!);
    const driverRedis = await RedisWakeups.open(redisUrl!);
    const driverStore = publishingWakeups(await openStore(opened.url), driverRedis);
    closers.push(() => driverStore.close());
    closers.push(() => apiRedis.close());
    const s = await sides(publishingWakeups(opened.store, apiRedis), driverStore);
    const probe = new Redis(redisUrl!);
    try {
      await waitFor(
        "the API server's reader of run streams to connect",
        async () => {
          const list = (await probe.client('LIST')) as string;
          return list.includes('name=oncely-run-events') ? true : undefined;
        },
        10_000,
        20,
      );
    } finally {
      probe.disconnect();
    }
    const heard = await streamWhileDriven(s, 'run_redis_1', WOKEN_WITHIN_MS);
    expect(heard.lagMs).toBeDefined();
    expect(heard.lagMs!).toBeLessThan(WOKEN_WITHIN_MS);
    expect(heard.names).toContain('status:completed');
  });
});
