import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApiMetrics } from '../../src/api/index.js';
import { Ledger, executeToolCall } from '../../src/calls/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { defineTool, external } from '../../src/tools/index.js';
import { tempSqlitePath } from '../support/databases.js';

/*
 * How often /metrics makes the database count: at most once per minReadIntervalMs (oncely serve:
 * --metrics-interval-ms, default 5 s), and scrapes that arrive during a read share it, however many
 * scrapers ask and however often; past the first read no scrape waits for the database. Counted on a
 * real SQLite store.
 */

const tool = defineTool({
  name: 'metrics_effect',
  description: 'keyed no-op',
  input: z.object({ n: z.number() }),
  effect: external(),
  execute: (args) => args,
});

const callsIn = (text: string): number =>
  Number(
    /^oncely_tool_call_records\{tool="metrics_effect",status="completed"\} (\d+)$/m.exec(text)?.[1] ?? 0,
  );

describe('the counts behind /metrics', () => {
  const file = tempSqlitePath('metrics_interval');
  let store: Store;
  let reads = 0;
  let counted: Store;

  beforeAll(async () => {
    store = await openStore(`sqlite:${file.path}`, { migrate: true });
    const monitor = Object.create(store.monitor) as Store['monitor'];
    monitor.stats = () => {
      reads += 1;
      return store.monitor.stats({ marginMs: 0 });
    };
    counted = Object.assign(Object.create(store) as Store, { monitor });
  });
  afterAll(async () => {
    await store.close();
    file.cleanup();
  });

  const call = (n: number) =>
    executeToolCall(
      new Ledger(store, { actorId: 'm' }),
      tool,
      { n },
      {
        tenantId: 'acme',
        runId: 'run_metrics',
        toolCallId: `c${n}`,
      },
    );

  it('are read at most once per interval, scrapes in flight sharing one read', async () => {
    reads = 0;
    const metrics = new ApiMetrics({ defaultMetrics: false, minReadIntervalMs: 1_000 });
    await call(1);
    const first = await Promise.all(Array.from({ length: 5 }, () => metrics.render(counted)));
    expect(reads).toBe(1);
    expect(first.map(callsIn)).toEqual([1, 1, 1, 1, 1]);

    await call(2);
    // Within the interval: the last read, not a new one.
    expect(callsIn(await metrics.render(counted))).toBe(1);
    expect(reads).toBe(1);
    await sleep(1_100);
    // Past the interval a scrape still answers at once, with the last counts (their age says so),
    // and starts one read for the scrapes after it.
    const stale = await Promise.all(Array.from({ length: 3 }, () => metrics.render(counted)));
    expect(stale.map(callsIn)).toEqual([1, 1, 1]);
    expect(Number(/^oncely_metrics_counts_age_seconds (\S+)$/m.exec(stale[0]!)?.[1])).toBeGreaterThanOrEqual(
      1,
    );
    for (let i = 0; i < 100 && reads < 2; i++) await sleep(20);
    expect(reads).toBe(2);
    for (let i = 0; i < 100 && callsIn(await metrics.render(counted)) !== 2; i++) await sleep(20);
    expect(callsIn(await metrics.render(counted))).toBe(2);
    expect(reads).toBe(2);
  });

  it('keeps the last counts when a read fails, and reads again on a later scrape', async () => {
    let failing = true;
    let tries = 0;
    const monitor = Object.create(store.monitor) as Store['monitor'];
    monitor.stats = (options) => {
      tries += 1;
      return failing && tries > 1
        ? Promise.reject(new Error('the database is away'))
        : store.monitor.stats(options);
    };
    const flaky = Object.assign(Object.create(store) as Store, { monitor });
    const metrics = new ApiMetrics({ defaultMetrics: false, minReadIntervalMs: 50 });
    const before = callsIn(await metrics.render(flaky));
    await call(4);
    await sleep(60);
    expect(callsIn(await metrics.render(flaky))).toBe(before); // starts a read, which fails
    for (let i = 0; i < 100 && tries < 2; i++) await sleep(10);
    await sleep(60);
    failing = false;
    expect(callsIn(await metrics.render(flaky))).toBe(before); // the last counts still; a new read
    for (let i = 0; i < 100 && callsIn(await metrics.render(flaky)) !== before + 1; i++) await sleep(20);
    expect(callsIn(await metrics.render(flaky))).toBe(before + 1);
  });

  it('are read on every scrape with an interval of 0', async () => {
    reads = 0;
    const metrics = new ApiMetrics({ defaultMetrics: false });
    expect(metrics.minReadIntervalMs).toBe(0);
    const before = callsIn(await metrics.render(counted));
    await call(3);
    expect(callsIn(await metrics.render(counted))).toBe(before + 1);
    expect(reads).toBe(2);
  });
});
