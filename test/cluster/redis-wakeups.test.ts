import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, defineTool, openRuntime, scriptedModel, write, type Runtime } from '../../src/index.js';
import { RedisWakeups, publishingWakeups } from '../../src/store/redis-wakeups.js';
import { startWorker, type Worker, type WorkerLog } from '../../src/worker/index.js';
import { waitFor } from '../support/processes.js';
import { openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * Wake-ups over Redis (ONCELY_REDIS_URL), here for a SQLite store, which has no wake-ups of its own:
 * a redis-server the test starts on a port of its own is SIGKILLed mid-test and started again. While
 * it is gone, runs still finish by polling; once it is back, wake-ups are heard again. One effect
 * per key throughout.
 */

const hasRedisServer = spawnSync('redis-server', ['--version']).status === 0;
if (!hasRedisServer) {
  if (process.env.ONCELY_REQUIRE_REDIS === '1')
    throw new Error('ONCELY_REQUIRE_REDIS=1 but redis-server is not installed');
  process.stderr.write('\n*** REDIS WAKE-UP TESTS SKIPPED: redis-server is not installed ***\n\n');
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** A redis-server of the test's own, on loopback, nothing saved. */
async function startRedis(port: number): Promise<ChildProcess> {
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  child.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  await waitFor(
    'redis-server to accept connections',
    () => Promise.resolve(out.includes('Ready to accept') || undefined),
    10_000,
    20,
  );
  return child;
}

class Lines implements WorkerLog {
  readonly lines: string[] = [];
  info(_f: Record<string, unknown>, message: string): void {
    this.lines.push(message);
  }
  warn(_f: Record<string, unknown>, message: string): void {
    this.lines.push(message);
  }
  error(_f: Record<string, unknown>, message: string): void {
    this.lines.push(message);
  }
  count(prefix: string): number {
    return this.lines.filter((l) => l.startsWith(prefix)).length;
  }
}

describe.skipIf(!hasRedisServer)('wake-ups over Redis, for a SQLite store', () => {
  let opened: OpenedStore;
  let runtime: Runtime;
  let worker: Worker | undefined;
  let redis: ChildProcess | undefined;
  const effects: string[] = [];
  beforeEach(async () => {
    opened = await openTestStore('sqlite', 'redis_wakeups');
    effects.length = 0;
  });
  afterEach(async () => {
    await worker?.stop();
    await runtime.close();
    redis?.kill('SIGKILL');
    await opened.cleanup();
  });

  it('claims a queued run at once; with Redis killed, polling finishes runs; restarted, wake-ups resume', async () => {
    const port = await freePort();
    redis = await startRedis(port);
    const wakeups = await RedisWakeups.open(`redis://127.0.0.1:${port}`);
    const store = publishingWakeups(opened.store, wakeups);
    const note = defineTool({
      name: 'note',
      description: 'Write a note',
      input: z.object({ text: z.string() }),
      effect: write(),
      execute: (_args, ctx) => {
        effects.push(ctx.idempotencyKey);
        return { ok: true };
      },
    });
    const agent = defineAgent({
      name: 'noter',
      instructions: 'Write one note.',
      model: scriptedModel([
        { toolCalls: [{ toolName: 'note', input: { text: 'hi' } }] },
        { text: 'Noted.' },
      ]),
      tools: [note],
    });
    runtime = await openRuntime({ store, agents: [agent] });
    const log = new Lines();
    worker = startWorker(runtime, { pollMs: 1500, sweepMs: 60_000, log });
    await waitFor(
      'the worker to listen',
      () => Promise.resolve(log.count('listening for wake-ups') > 0 || undefined),
      10_000,
    );
    await new Promise((resolve) => setTimeout(resolve, 100));

    const completed = (runId: string) =>
      waitFor(
        `${runId} to complete`,
        async () => ((await runtime.getRun('acme', runId)).status === 'completed' ? true : undefined),
        20_000,
        20,
      );

    const heardBefore = worker.wakeupsHeard;
    await runtime.startRun({ tenantId: 'acme', agent: 'noter', input: 'go', runId: 'r-woken' });
    await completed('r-woken');
    expect(worker.wakeupsHeard).toBeGreaterThan(heardBefore);

    // Redis is killed: the loss is logged; a run queued now is finished by polling.
    redis.kill('SIGKILL');
    await waitFor(
      'the loss to be noticed',
      () => Promise.resolve(log.count('lost the wake-up connection') > 0 || undefined),
      10_000,
    );
    const heardDuring = worker.wakeupsHeard;
    await runtime.startRun({ tenantId: 'acme', agent: 'noter', input: 'go', runId: 'r-polled' });
    await completed('r-polled');
    expect(worker.wakeupsHeard).toBe(heardDuring);

    // Redis is back on its port: the worker listens again, and hears the next run queued.
    redis = await startRedis(port);
    await waitFor(
      'it to listen again',
      () => Promise.resolve(log.count('listening for wake-ups') > 1 || undefined),
      20_000,
    );
    await new Promise((resolve) => setTimeout(resolve, 200)); // its SUBSCRIBE goes out as it is ready
    const heardAfter = worker.wakeupsHeard;
    await runtime.startRun({ tenantId: 'acme', agent: 'noter', input: 'go', runId: 'r-woken-again' });
    await completed('r-woken-again');
    expect(worker.wakeupsHeard).toBeGreaterThan(heardAfter);

    expect(effects).toHaveLength(3);
    expect(new Set(effects).size).toBe(3);
  }, 60_000);
});
