import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { RedisWakeups, runStreamKey } from '../../src/store/redis-wakeups.js';
import type { WakeListener } from '../../src/store/wakeups.js';
import { waitFor } from '../support/processes.js';
import { redisUrlOrSkip } from '../support/redis.js';

/*
 * Run events over Redis streams, on a live Redis: an API process reads the streams of the runs it
 * streams (and hears no other run), a run written while its reader's connection was cut is heard once
 * the reader is back (a pub/sub message sent then would be lost), and a run's stream stays one entry
 * long and expires.
 */

const redisUrl = await redisUrlOrSkip();

describe.skipIf(redisUrl === undefined)('run events over Redis streams', () => {
  const closers: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const close of closers.reverse()) await close();
    closers.length = 0;
  });

  async function setup() {
    const tenant = `t_${randomUUID().slice(0, 8)}`;
    const api = await RedisWakeups.open(redisUrl!);
    const writer = await RedisWakeups.open(redisUrl!);
    const heard: string[] = [];
    const listener: WakeListener = api.listen({
      onWake: () => undefined,
      onRunEvents: (tenantId, runId) => {
        if (tenantId === tenant) heard.push(runId);
      },
    });
    const probe = new Redis(redisUrl!);
    closers.push(async () => {
      probe.disconnect();
      await listener.close();
      await api.close();
      await writer.close();
    });
    return { tenant, writer, heard, listener, probe };
  }

  /** Writes the run's events until the listener has heard it `times` times in all. */
  async function writeUntilHeard(
    writer: RedisWakeups,
    tenant: string,
    runId: string,
    heard: string[],
    times: number,
  ): Promise<void> {
    await waitFor(
      `${runId} heard ${times} times`,
      () => {
        if (heard.filter((r) => r === runId).length >= times) return Promise.resolve(true);
        writer.publishRunEvents(tenant, runId);
        return Promise.resolve(undefined);
      },
      10_000,
      100,
    );
  }

  it('hears the runs it watches, from when the watch was placed, and no other run', async () => {
    const { tenant, writer, heard, listener } = await setup();
    // Written before the watch: what a stream's first read of the store already has.
    writer.publishRunEvents(tenant, 'run_a');
    await new Promise((resolve) => setTimeout(resolve, 100));
    const watch = listener.watchRunEvents!(tenant, 'run_a');
    await watch.ready;
    expect(heard).toEqual([]);
    writer.publishRunEvents(tenant, 'run_b'); // nobody here watches run_b
    await writeUntilHeard(writer, tenant, 'run_a', heard, 1);
    // A watch placed while the reader blocks on run_a's stream is read too.
    const second = listener.watchRunEvents!(tenant, 'run_c');
    await second.ready;
    await writeUntilHeard(writer, tenant, 'run_c', heard, 1);
    expect(heard).not.toContain('run_b');
    watch.unwatch();
    second.unwatch();
  });

  it('hears a run written while its reader connection was cut, once the reader is back', async () => {
    const { tenant, writer, heard, listener, probe } = await setup();
    const watch = listener.watchRunEvents!(tenant, 'run_cut');
    await watch.ready;
    await writeUntilHeard(writer, tenant, 'run_cut', heard, 1);
    const before = heard.length;
    const reader = await waitFor(
      'the reader connection',
      async () => {
        const list = (await probe.client('LIST')) as string;
        const line = list
          .split('\n')
          .find((l) => l.includes('name=oncely-run-events') && l.includes('cmd=xread'));
        return line === undefined ? undefined : /id=(\d+)/.exec(line)![1];
      },
      5_000,
      20,
    );
    // The reader is cut off; the run is written once while it reconnects, and never again.
    expect(await probe.client('KILL', 'ID', reader)).toBe(1);
    writer.publishRunEvents(tenant, 'run_cut');
    await waitFor(
      'the run written while cut off to be heard',
      () => Promise.resolve(heard.length > before || undefined),
      10_000,
      20,
    );
    expect(heard.slice(before)).toEqual(['run_cut']);
    watch.unwatch();
  });

  it("keeps a run's stream one entry long and lets it expire", async () => {
    const { tenant, writer, probe } = await setup();
    for (let i = 0; i < 50; i++) writer.publishRunEvents(tenant, 'run_long');
    const key = runStreamKey(tenant, 'run_long');
    await waitFor(
      'the writes to land',
      async () => ((await probe.exists(key)) === 1 ? true : undefined),
      5_000,
      20,
    );
    await probe.ping(); // the writer's pipelines before this answer have landed
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await probe.xlen(key)).toBe(1);
    const ttl = await probe.pttl(key);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(10 * 60_000);
  });
});
