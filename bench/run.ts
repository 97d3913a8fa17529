/**
 * Ledger benchmarks: guarded calls per second on each store, sequential and concurrent, replays, and
 * batch reservations. `npm run bench` (PostgreSQL from DATABASE_URL, default the local server).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { z } from 'zod';
import {
  defineAgent,
  defineTool,
  executeToolCall,
  executeToolCalls,
  external,
  Ledger,
  openRuntime,
  openStore,
  scriptedModel,
  type Store,
} from '../src/index.js';

const CALLS = Number(process.env.BENCH_CALLS ?? 2_000);
const RUN_STEPS = 10;
const STEP_CALLS = 8;
const CONCURRENCY = 16;

const tool = defineTool({
  name: 'bench_effect',
  description: 'does nothing, keyed',
  input: z.object({ n: z.number() }),
  effect: external(),
  execute: (args, ctx) => ({ n: args.n, key: ctx.idempotencyKey }),
});

interface Row {
  store: string;
  case: string;
  ops: number;
  seconds: number;
  perSecond: number;
  p50ms: number;
  p99ms: number;
}

async function measure(
  store: string,
  name: string,
  ops: number,
  concurrency: number,
  op: (i: number) => Promise<unknown>,
): Promise<Row> {
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < ops; i = next++) {
        const t = performance.now();
        await op(i);
        latencies.push(performance.now() - t);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  latencies.sort((a, b) => a - b);
  const at = (q: number): number =>
    Number((latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0).toFixed(2));
  return {
    store,
    case: name,
    ops,
    seconds: Number(seconds.toFixed(2)),
    perSecond: Math.round(ops / seconds),
    p50ms: at(0.5),
    p99ms: at(0.99),
  };
}

async function benchStore(label: string, url: string): Promise<Row[]> {
  const store = await openStore(url, { migrate: true });
  const ledger = new Ledger(store, { actorId: 'bench' });
  const run = `bench${Date.now()}`;
  const call = (i: number, prefix: string) => ({
    tenantId: 'bench',
    runId: run,
    toolCallId: `${prefix}${i}`,
  });
  const rows: Row[] = [];
  try {
    rows.push(
      await measure(label, 'new call, sequential', CALLS, 1, (i) =>
        executeToolCall(ledger, tool, { n: i }, call(i, 's')),
      ),
    );
    rows.push(
      await measure(label, `new call, ${CONCURRENCY} concurrent`, CALLS, CONCURRENCY, (i) =>
        executeToolCall(ledger, tool, { n: i }, call(i, 'c')),
      ),
    );
    rows.push(
      await measure(label, 'replay of a completed call', CALLS, CONCURRENCY, (i) =>
        executeToolCall(ledger, tool, { n: i }, call(i, 'c')),
      ),
    );
    const batch = 8;
    rows.push(
      await measure(label, `step of ${batch} parallel calls`, Math.floor(CALLS / batch), 4, (i) =>
        executeToolCalls(
          ledger,
          Array.from({ length: batch }, (_, j) => ({ tool, args: { n: j }, ...call(i * batch + j, 'b') })),
        ),
      ),
    );
    rows.push(await benchRuns(label, store));
  } finally {
    await ledger.close();
  }
  return rows;
}

/**
 * The run loop: runs of RUN_STEPS model steps, each asking for STEP_CALLS parallel calls. A step is a
 * model call, its checkpoint, one reservation transaction and one transaction for all outcomes and
 * the next checkpoint. Reported per step; latency is one whole run.
 */
async function benchRuns(label: string, store: Store): Promise<Row> {
  const step = {
    toolCalls: Array.from({ length: STEP_CALLS }, (_, n) => ({ toolName: tool.name, input: { n } })),
  };
  const model = scriptedModel([...Array.from({ length: RUN_STEPS }, () => step), { text: 'done' }]);
  const agent = defineAgent({
    name: 'bench',
    instructions: 'bench',
    model,
    tools: [tool],
    maxSteps: RUN_STEPS + 1,
  });
  const runtime = await openRuntime({ store, agents: [agent], owner: 'bench' });
  const runs = Math.max(1, Math.floor(CALLS / (RUN_STEPS * STEP_CALLS)));
  try {
    const row = await measure(label, `run loop, steps of ${STEP_CALLS} calls`, runs, 4, async () => {
      const { run } = await runtime.startRun({ tenantId: 'bench', agent: 'bench', input: 'go' });
      const done = await runtime.drive('bench', run.runId);
      if (done.status !== 'completed') throw new Error(`bench run ended ${done.status}`);
    });
    return { ...row, ops: runs * RUN_STEPS, perSecond: Math.round((runs * RUN_STEPS) / row.seconds) };
  } finally {
    await runtime.close();
  }
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-bench-'));
  const adminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const dbName = `oncely_bench_${process.pid}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${dbName}`);
  const pgUrl = new URL(adminUrl);
  pgUrl.pathname = `/${dbName}`;
  try {
    const rows = [
      ...(await benchStore('sqlite', `sqlite:${join(dir, 'bench.db')}`)),
      ...(await benchStore('postgres', pgUrl.toString())),
    ];
    console.table(rows);
    console.log(JSON.stringify({ calls: CALLS, node: process.version, rows }));
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
