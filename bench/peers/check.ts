/**
 * Smoke check of the peer cases: `node --import tsx bench/peers/check.ts`. Creates a scratch
 * database per case and round on the local server, opens the case, runs CHECK_OPS ops, prints
 * ops/s and p50, closes it and drops the database. Two rounds, so DBOS is launched again after a
 * shutdown, as in the bench. Exits by itself; it lists any handle left open and fails if so.
 */
import { performance } from 'node:perf_hooks';
import type { BenchCase } from '../case.js';
import { createDatabase, dropDatabase } from './scratch-db.js';

const SERVER = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const CHECK_OPS = Number(process.env.CHECK_OPS ?? 50);
const ROUNDS = Number(process.env.CHECK_ROUNDS ?? 2);
// Handles before anything opened (stdio pipes or TTYs): only handles beyond these are leaks.
const baseline = process.getActiveResourcesInfo();

// The cases read their op count when built, and divide it by the steps of one op (16 at most):
// ask for enough that every case has CHECK_OPS ops, and run CHECK_OPS of them.
process.env.BENCH_PEER_OPS = String(CHECK_OPS * 16);
const { dbosCases } = await import('./dbos.js');
const { langgraphCases } = await import('./langgraph.js');

interface Figure {
  round: number;
  case: string;
  ops: number;
  perSecond: number;
  p50ms: number;
}

async function measure(benchCase: BenchCase, round: number): Promise<Figure> {
  const db = `bench_peer_${process.pid}_${round}`;
  const url = await createDatabase(SERVER, db);
  const ops = Math.min(CHECK_OPS, benchCase.ops);
  try {
    const open = await benchCase.open(url);
    const latencies: number[] = [];
    let started = 0;
    try {
      started = performance.now();
      for (let i = 0; i < ops; i++) {
        const t = performance.now();
        await open.op(i);
        latencies.push(performance.now() - t);
      }
    } finally {
      await open.close();
    }
    const seconds = (performance.now() - started) / 1000;
    latencies.sort((a, b) => a - b);
    return {
      round,
      case: benchCase.id,
      ops,
      perSecond: Math.round(ops / seconds),
      p50ms: Number((latencies[Math.floor(latencies.length / 2)] ?? 0).toFixed(2)),
    };
  } finally {
    await dropDatabase(SERVER, db);
  }
}

const figures: Figure[] = [];
for (let round = 1; round <= ROUNDS; round++) {
  for (const benchCase of [...dbosCases(), ...langgraphCases()]) {
    figures.push(await measure(benchCase, round));
  }
}
console.table(figures);

// Let closed sockets and timers settle, then name whatever would keep the process alive.
await new Promise((resolve) => setTimeout(resolve, 200));
const left = process.getActiveResourcesInfo();
for (const kind of baseline) {
  const at = left.indexOf(kind);
  if (at >= 0) left.splice(at, 1);
}
if (left.length > 0) {
  console.error(`handles left open: ${left.join(', ')}`);
  process.exitCode = 1;
}
