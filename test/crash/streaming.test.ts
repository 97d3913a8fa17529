import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApiServer, createApiKey, type ApiApp } from '../../src/api/index.js';
import { loadConfig } from '../../src/config/index.js';
import { openRuntime, type Runtime } from '../../src/runs/index.js';
import { RedisWakeups, publishingWakeups } from '../../src/store/redis-wakeups.js';
import type { Store } from '../../src/store/index.js';
import { OncelyProcess, waitFor } from '../support/processes.js';
import { redisUrlOrSkip } from '../support/redis.js';
import { openTestStore, type OpenedStore, type StoreKind } from '../support/stores.js';
import { readSse, type SseEvent } from '../support/sse.js';

/*
 * A process killed (SIGKILL) in the middle of a streamed answer: the client watching the run's event
 * stream sees the first deltas, then the step begin again from another process marked `restarted`,
 * and the whole answer once, as the durable record has it. The worker processes are real; the
 * deltas reach the API process by PostgreSQL NOTIFY, or on SQLite by Redis pub/sub.
 */

const TENANT = 'acme';
const LEASE_MS = 1_000;
const CONFIG = fileURLToPath(new URL('fixture/stream.yaml', import.meta.url));
const ANSWER = 'One two three four five six seven eight nine ten eleven twelve, and that is all.';
const redisUrl = await redisUrlOrSkip();

const kinds: StoreKind[] = redisUrl === undefined ? ['postgres'] : ['postgres', 'sqlite'];

describe.each(kinds)('a streamed answer whose process is killed mid-answer, on %s', (kind) => {
  let opened: OpenedStore;
  let store: Store;
  let runtime: Runtime;
  let app: ApiApp;
  let base: string;
  let viewer: string;
  const processes: OncelyProcess[] = [];
  const env = kind === 'sqlite' ? { ONCELY_REDIS_URL: redisUrl! } : {};

  beforeAll(async () => {
    opened = await openTestStore(kind, 'crash_stream');
    store =
      kind === 'sqlite' ? publishingWakeups(opened.store, await RedisWakeups.open(redisUrl!)) : opened.store;
    const loaded = await loadConfig(CONFIG, { env: {} });
    runtime = await openRuntime({ store, agents: [...loaded.agents.values()], owner: 'api-process' });
    app = await buildApiServer({ runtime, eventPollMs: 100 });
    base = await app.listen({ host: '127.0.0.1', port: 0 });
    viewer = (await createApiKey(store.apiKeys, { tenantId: TENANT, actorId: 'watcher', role: 'viewer' }))
      .key;
  });
  afterAll(async () => {
    await Promise.all(processes.map((p) => p.kill()));
    await app.close();
    await runtime.close();
    // The SQLite store's Redis wrapper closes its Redis and the store; cleanup then removes the file.
    if (store !== opened.store) await store.close();
    await opened.cleanup();
  });

  const worker = (): OncelyProcess => {
    const p = new OncelyProcess(
      [
        'worker',
        '-c',
        CONFIG,
        '--database-url',
        opened.url,
        '--lease-ms',
        String(LEASE_MS),
        '--poll-ms',
        '50',
      ],
      env,
    );
    processes.push(p);
    return p;
  };

  it('shows the deltas, then the step asked again marked restarted, then the whole answer once', async () => {
    const { run } = await runtime.startRun({ tenantId: TENANT, agent: 'streamer', input: 'count' });
    const response = await fetch(`${base}/v1/runs/${run.runId}/events`, {
      headers: { authorization: `Bearer ${viewer}` },
    });
    expect(response.status).toBe(200);
    const events: SseEvent[] = [];
    const reading = readSse(response, { onEvent: (event) => events.push(event) });
    // The stream's watch is in place after its first read; then the first worker answers.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const a = worker();
    const texts = (): SseEvent[] => events.filter((e) => e.event === 'model.delta' && e.data.type === 'text');
    await waitFor(
      'the first deltas of the answer',
      () => Promise.resolve(texts().length >= 3 ? true : undefined),
      20_000,
    );
    a.child.kill('SIGKILL');
    await a.exited;
    const seenBeforeKill = texts().length;
    expect(seenBeforeKill).toBeLessThan(15);

    worker();
    await reading; // the stream ends once the run is completed
    const done = await store.runs.get(TENANT, run.runId);
    expect(done?.status).toBe('completed');
    expect(done?.result).toEqual({ text: ANSWER });

    const starts = events.filter((e) => e.event === 'model.delta' && e.data.type === 'start');
    expect(starts.map((e) => [e.data.step, e.data.restarted])).toEqual([
      [1, false],
      [1, true],
    ]);
    expect(Number(starts[1]!.data.epoch)).toBeGreaterThan(Number(starts[0]!.data.epoch));
    // The second stream is the whole answer, in order, once; the durable response says the same.
    const second = events.filter(
      (e) =>
        e.event === 'model.delta' &&
        e.data.epoch === starts[1]!.data.epoch &&
        e.data.stream === starts[1]!.data.stream,
    );
    expect(second.map((e) => e.data.seq)).toEqual(second.map((_, i) => i + 1));
    expect(
      second
        .filter((e) => e.data.type === 'text')
        .map((e) => e.data.text)
        .join(''),
    ).toBe(ANSWER);
    const durable = events.filter((e) => e.event === 'model.response');
    expect(durable).toHaveLength(1);
    expect((durable[0]!.data.data as { text: string }).text).toBe(ANSWER);
    expect(events.indexOf(durable[0]!)).toBeGreaterThan(events.indexOf(second.at(-1)!));
    const claims = events.filter((e) => e.event === 'run.claimed');
    expect(claims).toHaveLength(2);
  });
});
