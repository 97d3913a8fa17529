/**
 * A sweep pass over every waiting run of the database at `process.argv[2]`, as a worker makes it, in
 * a process of its own: prints its time, the runs it looked at and the process's memory (RSS) as JSON.
 * Run by bench/scale.ts.
 */
import { performance } from 'node:perf_hooks';
import { Ledger, openStore } from '../src/index.js';
import type { WaitingCursor } from '../src/store/index.js';
import { sweepWaiting } from '../src/runs/resume.js';

const url = process.argv[2];
if (url === undefined) throw new Error('usage: scale-sweep.ts <database url>');
const store = await openStore(url);
try {
  const ledger = new Ledger(store, { actorId: 'bench-sweep' });
  let runs = 0;
  for (const status of ['awaiting_reconciliation', 'awaiting_approval'] as const) {
    for (let after: WaitingCursor | undefined, page = 0; page < 10_000; page++) {
      const rows = await store.runs.listWaiting(status, 1_000, after);
      runs += rows.length;
      const last = rows.at(-1);
      if (last === undefined) break;
      after = { at: last.updatedAt, tenantId: last.tenantId, runId: last.runId };
    }
  }
  const cursors = new Map<string, WaitingCursor>();
  const started = performance.now();
  // One page of each waiting status per sweep, as a worker's sweeps go, until both have wrapped.
  for (let sweeps = 0; sweeps < 100_000; sweeps++) {
    await sweepWaiting({ ledger, cursors });
    if (cursors.size === 0) break;
  }
  const seconds = (performance.now() - started) / 1000;
  console.log(JSON.stringify({ seconds, runs, rssMiB: process.memoryUsage().rss / 2 ** 20 }));
} finally {
  await store.close();
}
