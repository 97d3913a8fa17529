/**
 * How long calls of a limited tool wait for each other: 36 calls of a tool taking ~37 ms, limited
 * to 2 at once (`concurrency: 2`), so at best 18 rounds of 37 ms ≈ 0.67 s. Measured as
 *  - `one store`: 36 guarded calls at once through one store (a waiter is woken by a release here);
 *  - `two stores` (PostgreSQL): 18 through each of two stores on one database, standing for two
 *    processes (a waiter is woken by the other's release through LISTEN/NOTIFY, as a worker's is);
 *  - `one batch`: the 36 calls as one `executeToolCalls` (in waves of 2).
 * Prints the median of a few repetitions of each, as JSON lines.
 *
 *   node --import tsx bench/tool-slots.ts sqlite:/tmp/slots.db
 *   node --import tsx bench/tool-slots.ts postgres://postgres@127.0.0.1:5432/bench_slots
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { performance } from 'node:perf_hooks';
import { z } from 'zod';
import { ringToolSlots } from '../src/calls/index.js';
import { defineTool, executeToolCall, executeToolCalls, Ledger, openStore, write } from '../src/index.js';
import type { Store, WakeListener } from '../src/store/index.js';

const CALLS = 36;
const LIMIT = 2;
const CALL_MS = 37;
const REPEATS = Number(process.env.BENCH_REPEATS ?? 5);

const url = process.argv[2];
if (url === undefined) throw new Error('usage: tool-slots.ts <database url>');

let seq = 0;
const limitedTool = () =>
  defineTool({
    name: `bench_limited_${Date.now()}_${++seq}`,
    description: 'takes 37 ms, two at once',
    input: z.object({ n: z.number() }),
    effect: write(),
    concurrency: LIMIT,
    execute: async (args) => {
      await sleep(CALL_MS);
      return { n: args.n };
    },
  });

const call = (i: number, runId: string) => ({ tenantId: 'bench', runId, toolCallId: `c${i}` });

/** Listens for the store's wake-ups and hands `slot` to its waiters, as a worker does. */
function listen(store: Store): WakeListener | undefined {
  return store.wakeups?.listen({
    onWake: (kind) => {
      if (kind === 'slot') ringToolSlots(store.toolSlots);
    },
  });
}

async function timed(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await work();
  return (performance.now() - started) / 1000;
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const onPostgres = !url.startsWith('sqlite:');
const first = await openStore(url, { migrate: true });
// One SQLite file is opened once per process (two connections in one process stall each other).
const second = onPostgres ? await openStore(url) : first;
const listeners = onPostgres ? [listen(first), listen(second)] : [];
await sleep(500); // the listening connections are up
try {
  const ledgers = [first, second].map((s) => new Ledger(s, { actorId: 'bench-slots' }));
  const cases: Record<string, (runId: string) => Promise<unknown>> = {
    'one store': (runId) => {
      const tool = limitedTool();
      return Promise.all(
        Array.from({ length: CALLS }, (_, i) => executeToolCall(ledgers[0]!, tool, { n: i }, call(i, runId))),
      );
    },
    'two stores': (runId) => {
      const tool = limitedTool();
      return Promise.all(
        Array.from({ length: CALLS }, (_, i) =>
          executeToolCall(ledgers[i % 2]!, tool, { n: i }, call(i, runId)),
        ),
      );
    },
    'one batch': (runId) => {
      const tool = limitedTool();
      return executeToolCalls(
        ledgers[0]!,
        Array.from({ length: CALLS }, (_, i) => ({ tool, args: { n: i }, ...call(i, runId) })),
      );
    },
  };
  if (!onPostgres) delete cases['two stores'];
  for (const [name, work] of Object.entries(cases)) {
    const seconds: number[] = [];
    for (let r = 0; r < REPEATS; r++) seconds.push(await timed(() => work(`slots_${Date.now()}_${++seq}`)));
    console.log(
      JSON.stringify({
        store: onPostgres ? 'postgres' : 'sqlite',
        case: name,
        calls: CALLS,
        limit: LIMIT,
        callMs: CALL_MS,
        medianSeconds: Number(median(seconds).toFixed(3)),
        runs: seconds.map((s) => Number(s.toFixed(3))),
      }),
    );
  }
} finally {
  for (const listener of listeners) await listener?.close();
  if (second !== first) await second.close();
  await first.close();
}
