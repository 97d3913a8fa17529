/**
 * Run storage over a long run (issue: a step's cost must not grow with the run's length): one run of
 * STEPS steps per store, each step one keyed call whose result is 1 KiB, timed step by step, with the
 * bytes each step wrote. Part of `npm run bench` (section "Run storage" of docs/benchmarks.md).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import pg from 'pg';
import { z } from 'zod';
import { defineAgent, defineTool, external, openRuntime, openStore, scriptedModel } from '../src/index.js';
import { median } from './measure.js';
import { clusterMarkdown, type ClusterReport } from './cluster.js';
import { driverMarkdown, type DriverReport } from './driver.js';
import { scaleMarkdown, type ScaleResult } from './scale.js';

export const STEPS = 200;
const TENANT = 'bench';
const RUN_ID = 'long_run';

/** What one store did over the long runs: per step, the median over the runs. */
export interface LongRunResult {
  readonly store: 'postgres' | 'sqlite';
  readonly runs: number;
  /** Median step time (ms) of steps 1-10 and of steps STEPS-9..STEPS. */
  readonly firstStepsMs: number;
  readonly lastStepsMs: number;
  /** What the bytes are: WAL bytes (PostgreSQL), or bytes of rows written (SQLite). */
  readonly bytesAre: string;
  /** Bytes written by step 1, 100 and STEPS. */
  readonly bytesAtStep: Readonly<Record<string, number>>;
  /** The final conversation's size, in bytes of JSON. */
  readonly conversationBytes: number;
}

/** The time (and a byte count) as each model call starts: step n runs between calls n and n+1. */
interface Mark {
  readonly at: number;
  readonly bytes: number;
}

async function oneRun(
  url: string,
  bytesNow: () => Promise<number>,
): Promise<{ marks: Mark[]; size: number }> {
  const tool = defineTool({
    name: 'lookup_order',
    description: 'returns 1 KiB (random hex, which compression cannot shrink), keyed',
    input: z.object({ n: z.number() }),
    effect: external(),
    execute: () => ({ order: randomBytes(512).toString('hex') }),
  });
  const marks: Mark[] = [];
  const agent = defineAgent({
    name: 'long',
    instructions: 'look up orders',
    model: scriptedModel(async (_prompt, turn) => {
      marks.push({ at: performance.now(), bytes: await bytesNow() });
      return turn < STEPS ? { toolCalls: [{ toolName: tool.name, input: { n: turn } }] } : { text: 'done' };
    }),
    tools: [tool],
    maxSteps: STEPS + 1,
  });
  const store = await openStore(url, { migrate: true });
  const runtime = await openRuntime({ store, agents: [agent] });
  try {
    const run = await runtime.run({ tenantId: TENANT, agent: 'long', input: 'go', runId: RUN_ID });
    if (run.status !== 'completed') throw new Error(`the long run ended ${run.status}`);
    return { marks, size: Buffer.byteLength(JSON.stringify(run.checkpoint.messages)) };
  } finally {
    await runtime.close();
    await store.close();
  }
}

function summarise(
  store: LongRunResult['store'],
  bytesAre: string,
  runs: readonly { marks: Mark[]; size: number }[],
): LongRunResult {
  // Step n (1-based) is marks[n] - marks[n-1]: from its model call to the next one.
  const stepMs = (n: number): number => median(runs.map((r) => r.marks[n]!.at - r.marks[n - 1]!.at));
  const stepBytes = (n: number): number => median(runs.map((r) => r.marks[n]!.bytes - r.marks[n - 1]!.bytes));
  const range = (from: number, to: number): number[] =>
    Array.from({ length: to - from + 1 }, (_, i) => from + i);
  return {
    store,
    runs: runs.length,
    firstStepsMs: median(range(1, 10).map(stepMs)),
    lastStepsMs: median(range(STEPS - 9, STEPS).map(stepMs)),
    bytesAre,
    bytesAtStep: Object.fromEntries([1, 100, STEPS].map((n) => [String(n), stepBytes(n)])),
    conversationBytes: median(runs.map((r) => r.size)),
  };
}

/** Long runs on PostgreSQL (`url` a fresh database) and on a SQLite file. */
export async function longRuns(
  pgUrl: () => Promise<{ url: string; drop(): Promise<void> }>,
  runs: number,
  progress: (message: string) => void,
): Promise<LongRunResult[]> {
  const onPg: { marks: Mark[]; size: number }[] = [];
  const onLite: { marks: Mark[]; size: number }[] = [];
  for (let i = 1; i <= runs; i++) {
    progress(`run storage: a run of ${STEPS} steps on PostgreSQL (${i}/${runs})`);
    const db = await pgUrl();
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      onPg.push(
        await oneRun(db.url, async () => {
          const { rows } = await client.query<{ wal: string }>(
            `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::text AS wal`,
          );
          return Number(rows[0]!.wal.split('.')[0]);
        }),
      );
    } finally {
      await client.end();
      await db.drop();
    }
    progress(`run storage: a run of ${STEPS} steps on SQLite (${i}/${runs})`);
    const dir = mkdtempSync(join(tmpdir(), 'oncely-long-'));
    const path = join(dir, 'long.db');
    let reader: Database.Database | undefined;
    try {
      // Bytes of the messages the run holds, read on a connection of its own: only the rows appended
      // since the last look (a range of the primary key), so the reading does not grow with the run.
      let seen = -1;
      let total = 0;
      onLite.push(
        await oneRun(`sqlite:${path}`, () => {
          reader ??= new Database(path, { readonly: true });
          const rows = reader
            .prepare<[string, string, number], { idx: number; n: number }>(
              'SELECT idx, length(message) AS n FROM run_messages WHERE tenant_id = ? AND run_id = ? AND idx > ?',
            )
            .all(TENANT, RUN_ID, seen);
          for (const row of rows) {
            total += row.n;
            seen = Math.max(seen, row.idx);
          }
          return Promise.resolve(total);
        }),
      );
    } finally {
      reader?.close();
      rmSync(dir, { recursive: true, force: true });
    }
  }
  return [
    summarise('postgres', 'WAL bytes the step moved', onPg),
    summarise('sqlite', 'bytes of message rows the step appended', onLite),
  ];
}

/** What `npm run bench` measured of run storage, kept in docs/benchmarks.json. */
export interface StorageReport {
  readonly longRuns: readonly LongRunResult[];
  readonly scale?: ScaleResult;
  /** Many workers: wake-up latency and cluster throughput (bench/cluster.ts). */
  readonly cluster?: ClusterReport;
  /** The guarded call's statements through pg and through postgres.js (bench/driver.ts). */
  readonly driver?: DriverReport;
}

const ms = (n: number): string => (n >= 100 ? String(Math.round(n)) : n.toFixed(2));

/** The "Run storage" section of docs/benchmarks.md. */
export function storageMarkdown(report: StorageReport): string[] {
  const lines: string[] = ['## Run storage', ''];
  lines.push(
    `One run of ${STEPS} steps per store, each step one keyed call whose result is 1 KiB of random hex,`,
    `driven by \`runtime.run\` on a fresh database (or file), ${report.longRuns[0]?.runs ?? 0} times; a step is`,
    'timed from its model call to the next one. Steps 1-10 and the last ten are compared (medians); the',
    'bytes are those step 1, 100 and the last wrote.',
    '',
    `| store | steps 1-10, ms | steps ${STEPS - 9}-${STEPS}, ms | last / first | target (≤ 1.2×) | bytes at step 1 / 100 / ${STEPS} | what the bytes are | final conversation |`,
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
  );
  for (const r of report.longRuns) {
    const ratio = r.lastStepsMs / r.firstStepsMs;
    const bytes = ['1', '100', String(STEPS)]
      .map((k) => String(Math.round(r.bytesAtStep[k] ?? NaN)))
      .join(' / ');
    lines.push(
      `| ${r.store} | ${ms(r.firstStepsMs)} | ${ms(r.lastStepsMs)} | ${ratio.toFixed(2)}× | ${ratio <= 1.2 ? 'met' : '**missed**'} | ${bytes} | ${r.bytesAre} | ${Math.round(r.conversationBytes / 1024)} KiB |`,
    );
  }
  lines.push('');
  if (report.scale !== undefined) lines.push(...scaleMarkdown(report.scale));
  if (report.cluster !== undefined) lines.push(...clusterMarkdown(report.cluster));
  if (report.driver !== undefined) lines.push(...driverMarkdown(report.driver));
  return lines;
}
