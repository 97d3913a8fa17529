/**
 * `node --import tsx bench/metrics-counts.ts [scrape|writes|all]`: what the `/metrics` counts cost,
 * on their own, without the whole bench. Needs `DATABASE_URL` (a PostgreSQL server where it may
 * create and drop databases).
 *
 * - `scrape`: a database of 1,000,000 ledger rows and 300,000 runs (the "At scale" population of
 *   bench/scale.ts), then 30 uncached reads of the counts (`monitor.stats`, what a scrape with
 *   `--metrics-interval-ms 0` waits for) and 30 uncached renders of the whole exposition.
 * - `writes`: the guarded call of a new key (the bench's `pg.call.new.seq` and `.c16`) on a database
 *   that keeps the call counts as it writes (schema 0017's triggers) beside one whose triggers were
 *   dropped, in alternating rounds, with the floor of two autocommit writes for scale.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { z } from 'zod';
import { ApiMetrics } from '../src/api/index.js';
import { Ledger, defineTool, executeToolCall, external, openStore } from '../src/index.js';
import { median, quantile } from './measure.js';
import { LEDGER_ROWS, RUNS, populate } from './scale.js';

const ADMIN = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
/**
 * `BENCH_SYNC_OFF=1`: the write legs' databases commit without waiting for the WAL flush, so the
 * figures are the statements' own cost (CPU, locks), not the disk's (a busy shared disk's flush
 * time swamps a trigger's few microseconds).
 */
const SYNC_OFF = process.env.BENCH_SYNC_OFF === '1';

/** The triggers that keep the call counts (schema 0017); a database without them counts nothing as it writes. */
const COUNT_TRIGGERS = ['tool_executions_count_inserted', 'tool_executions_count_updated'];

async function freshDatabase(label: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `oncely_b_${label}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(ADMIN);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: ADMIN });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

const ms = (n: number): string => n.toFixed(2);

async function syncOff(url: string): Promise<void> {
  if (!SYNC_OFF) return;
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query(`ALTER DATABASE ${new URL(url).pathname.slice(1)} SET synchronous_commit = off`);
  await c.end();
}

async function timed(n: number, op: () => Promise<unknown>): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await op();
    times.push(performance.now() - t);
  }
  return times.sort((a, b) => a - b);
}

async function scrape(): Promise<void> {
  const db = await freshDatabase('scrape');
  const store = await openStore(db.url, { migrate: true });
  try {
    const t0 = performance.now();
    await populate(db.url);
    const populated = (performance.now() - t0) / 1000;
    const metrics = new ApiMetrics({ defaultMetrics: false, minReadIntervalMs: 0 });
    await metrics.render(store); // warm: connections, plans, pages in cache
    const reads = await timed(30, () => store.monitor.stats({ marginMs: 5_000 }));
    const renders = await timed(30, () => metrics.render(store));
    const stats = await store.monitor.stats({ marginMs: 5_000 });
    const calls = stats.calls.reduce((n, c) => n + c.count, 0);
    console.log(
      `scrape at ${LEDGER_ROWS.toLocaleString('en')} calls (${calls.toLocaleString('en')} counted), ` +
        `${RUNS.toLocaleString('en')} runs, populated in ${populated.toFixed(0)} s:\n` +
        `  counts read (monitor.stats): p50 ${ms(median(reads))} ms, p95 ${ms(quantile(reads, 0.95))} ms\n` +
        `  uncached render (/metrics, interval 0): p50 ${ms(median(renders))} ms, p95 ${ms(quantile(renders, 0.95))} ms`,
    );
  } finally {
    await store.close();
    await db.drop();
  }
}

const tool = defineTool({
  name: 'bench_effect',
  description: 'does nothing, keyed',
  input: z.object({ n: z.number() }),
  effect: external(),
  execute: (args) => ({ n: args.n }),
});

interface Leg {
  readonly label: string;
  run(round: number, concurrency: number, ops: number): Promise<number>;
  close(): Promise<void>;
}

/** Guarded calls of new keys on a database of its own; per-call ms (wall time / calls). */
async function guardedLeg(label: string, counting: boolean): Promise<Leg> {
  const db = await freshDatabase(label);
  await syncOff(db.url);
  const store = await openStore(db.url, { migrate: true });
  if (!counting) {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    for (const name of COUNT_TRIGGERS) await c.query(`DROP TRIGGER IF EXISTS ${name} ON tool_executions`);
    await c.end();
  }
  const ledger = new Ledger(store, { actorId: 'bench' });
  return {
    label,
    async run(round, concurrency, ops) {
      let next = 0;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          for (let i = next++; i < ops; i = next++) {
            await executeToolCall(
              ledger,
              tool,
              { n: i },
              {
                tenantId: 'bench',
                runId: `r${round}c${concurrency}`,
                toolCallId: `c${i}`,
              },
            );
          }
        }),
      );
      return (performance.now() - started) / ops;
    },
    async close() {
      await ledger.close();
      await db.drop();
    },
  };
}

/** The floor: an insert and an update, autocommit, one connection. */
async function floorLeg(): Promise<Leg> {
  const db = await freshDatabase('floor');
  await syncOff(db.url);
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  await client.query('CREATE TABLE bench_floor (id text PRIMARY KEY, status text, v jsonb)');
  return {
    label: 'floor (two autocommit writes)',
    async run(round, concurrency, ops) {
      if (concurrency !== 1) return Number.NaN;
      const started = performance.now();
      for (let i = 0; i < ops; i++) {
        const id = `r${round}w${i}`;
        await client.query(`INSERT INTO bench_floor (id, status, v) VALUES ($1, 'started', '{"n":1}')`, [id]);
        await client.query(`UPDATE bench_floor SET status = 'completed', v = '{"n":2}' WHERE id = $1`, [id]);
      }
      return (performance.now() - started) / ops;
    },
    async close() {
      await client.end();
      await db.drop();
    },
  };
}

async function writes(): Promise<void> {
  const legs = [await guardedLeg('counted', true), await guardedLeg('uncounted', false), await floorLeg()];
  const labels = [
    'guarded call, counts kept (0017 triggers)',
    'guarded call, triggers dropped',
    legs[2]!.label,
  ];
  try {
    for (const [concurrency, ops] of [
      [1, 1000],
      [16, 2000],
    ] as const) {
      const per: number[][] = legs.map(() => []);
      for (let round = 0; round < ROUNDS; round++) {
        // Alternate which goes first, so neither always meets a warmer (or busier) server.
        const order = round % 2 === 0 ? [0, 1, 2] : [2, 1, 0];
        for (const i of order) per[i]!.push(await legs[i]!.run(round, concurrency, ops));
      }
      console.log(
        `guarded call of a new key, ${concurrency === 1 ? 'sequential' : '16 concurrent'}, ${ROUNDS} rounds of ${ops} (median of round means, ms a call):`,
      );
      legs.forEach((_, i) => {
        const m = median(per[i]!);
        if (!Number.isNaN(m)) console.log(`  ${labels[i]}: ${ms(m)} ms  [${per[i]!.map(ms).join(' ')}]`);
      });
      const ratios = per[0]!.map((c, i) => c / per[1]![i]!);
      console.log(
        `  counted / uncounted, per round: ${ratios.map((r) => r.toFixed(3)).join(' ')}; median ${median(ratios).toFixed(3)}`,
      );
    }
  } finally {
    for (const leg of legs) await leg.close();
  }
}

const what = process.argv[2] ?? 'all';
if (what === 'scrape' || what === 'all') await scrape();
if (what === 'writes' || what === 'all') await writes();
