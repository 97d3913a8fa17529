import type { BenchCase } from './case.js';
import { median, type Sample } from './measure.js';
import { storageMarkdown, type StorageReport } from './storage.js';
import { LOOP_STEPS } from './oncely-cases.js';

/** A target of the promise's cost: `value(round)` from one round's samples, held to `limit`. */
export interface Target {
  readonly id: string;
  readonly says: string;
  /** `ratio`: lower is better, must be ≤ limit (or < when `strict`); `at-least`: must be ≥ limit. */
  readonly kind: 'at-most' | 'below' | 'at-least' | 'equals';
  readonly limit: number;
  readonly unit: '×' | 'commits' | '%';
  /** From one round's samples by case id; undefined when a case it needs did not run. */
  value(round: ReadonlyMap<string, Sample>): number | undefined;
  /** Why it stands where it does, when it is missed (kept true by whoever measures). */
  readonly whenMissed?: string;
}

const p50 = (round: ReadonlyMap<string, Sample>, id: string): number | undefined => round.get(id)?.p50ms;
/**
 * One run-loop step alone: a run of LOOP_STEPS steps less a run with none, per step (`pick` of a
 * sample is per unit: per step for the loop case, per run for the empty run).
 */
const stepAlone = (
  round: ReadonlyMap<string, Sample>,
  k: number,
  pick: (s: Sample) => number | undefined,
): number | undefined => {
  const loop = round.get(`pg.step.k${k}.loop`);
  const empty = round.get('pg.run.empty');
  const perStep = loop === undefined ? undefined : pick(loop);
  const perRun = empty === undefined ? undefined : pick(empty);
  if (perStep === undefined || perRun === undefined) return undefined;
  return (perStep * LOOP_STEPS - perRun) / LOOP_STEPS;
};
const ratio = (a: number | undefined, b: number | undefined): number | undefined =>
  a === undefined || b === undefined ? undefined : a / b;

export const TARGETS: readonly Target[] = [
  {
    id: 'call-vs-floor',
    says: 'a guarded call (new key, sequential) within 1.3× the two-write floor (p50)',
    kind: 'at-most',
    limit: 1.3,
    unit: '×',
    value: (r) => ratio(p50(r, 'pg.call.new.seq'), p50(r, 'pg.floor.two-writes')),
    whenMissed:
      "a guarded call is two statements and two commits like the floor, but each also appends a history event and keeps the ledger's indexes (primary key, unknown calls, by run, by time: an outcome changes the status, so its update is never HOT), and the JavaScript around them (validating the arguments, the digest, the decision table) adds its CPU",
  },
  {
    id: 'replay-vs-read',
    says: 'a replay (sequential) within 1.2× a single-row read (p50)',
    kind: 'at-most',
    limit: 1.2,
    unit: '×',
    value: (r) => ratio(p50(r, 'pg.call.replay.seq'), p50(r, 'pg.floor.read')),
    whenMissed:
      "a replay is one statement and no commit, but it is the reservation's insert-if-absent (the insert's check of the key, then the standing row read in the same statement), not a bare primary-key read, and the arguments are validated and digested first; reading before inserting would cost every new call a round trip",
  },
  {
    id: 'replay-commits',
    says: 'a replay commits nothing',
    kind: 'equals',
    limit: 0,
    unit: 'commits',
    value: (r) => r.get('pg.call.replay.seq')?.commitsPerUnit,
  },
  ...[1, 4, 16].map((k): Target => ({
    id: `loop-commits-k${k}`,
    says: `a run-loop step of ${k} call${k === 1 ? '' : 's'} costs 2 commits`,
    kind: 'at-most',
    limit: 2,
    unit: 'commits',
    value: (r) => stepAlone(r, k, (s) => s.commitsPerUnit),
  })),
  ...[1, 4, 16].map((k): Target => ({
    id: `execute-commits-k${k}`,
    says: `executeToolCalls of ${k} call${k === 1 ? '' : 's'} costs 2 commits`,
    kind: 'at-most',
    limit: 2,
    unit: 'commits',
    value: (r) => r.get(`pg.step.k${k}.execute`)?.commitsPerUnit,
  })),
  {
    id: 'run-vs-dbos',
    says: 'a whole agent run of 3 tool calls within 1.0× a DBOS workflow of 3 steps (p50)',
    kind: 'at-most',
    limit: 1,
    unit: '×',
    value: (r) => ratio(p50(r, 'pg.run.calls-3'), p50(r, 'peer.dbos.workflow-3')),
    whenMissed:
      'a run writes 2 commits a step plus 2 of its own (its start, claimed as it is created, and its answer) where DBOS writes one a step plus two, and each save appends its messages as rows of their own (the append-only history that keeps step 200 as cheap as step 1, see Run storage; about 0.1 ms a save on a short run, measured against the rewritten checkpoint in an A/B)',
  },
  {
    id: 'run-vs-langgraph',
    says: 'a whole agent run of 3 tool calls within 0.5× a LangGraph graph of 3 nodes (p50)',
    kind: 'at-most',
    limit: 0.5,
    unit: '×',
    value: (r) => ratio(p50(r, 'pg.run.calls-3'), p50(r, 'peer.langgraph.graph-3')),
    whenMissed: "as against DBOS: 2 commits a step and the run's own two",
  },
  {
    id: 'loop16-vs-dbos',
    says: "a run-loop step of 16 calls faster than DBOS's 16 parallel steps (p50)",
    kind: 'below',
    limit: 1,
    unit: '×',
    value: (r) =>
      ratio(
        stepAlone(r, 16, (s) => s.p50ms),
        p50(r, 'peer.dbos.parallel-16'),
      ),
    whenMissed:
      "the step's two writes carry 16 reservations and 16 outcomes with their history events; DBOS writes 16 small step rows",
  },
  {
    id: 'model-flat',
    says: "the model call's own overhead at 48 KiB of history within 1.25× of at 0 KiB (p50)",
    kind: 'at-most',
    limit: 1.25,
    unit: '×',
    value: (r) => ratio(p50(r, 'model.oncely.h48'), p50(r, 'model.oncely.h0')),
    whenMissed:
      "the prompt is extended in place, but the driver's list of messages is copied once a step, and a call takes microseconds, so the machine's noise shows",
  },
  {
    id: 'sqlite-vs-floor',
    says: 'embedded SQLite (guarded calls per second) at ≥ 60% of its own two-write floor',
    kind: 'at-least',
    limit: 60,
    unit: '%',
    value: (r) => {
      const call = r.get('sqlite.call.new.seq')?.perSecond;
      const floor = r.get('sqlite.floor.two-writes')?.perSecond;
      return call === undefined || floor === undefined ? undefined : (100 * call) / floor;
    },
    whenMissed:
      "a call commits twice like the floor, but each commit writes more pages to the WAL (the record with its four indexes, a history event with its index) and the fsync and WAL checkpoints grow with them; the same two transactions sent as bare SQL come to about 70% of the floor, and oncely's own work per call (validating and digesting the arguments, the decision table, the attempt's timer and signal, the file and schema checks under the write lock) takes the rest",
  },
];

export interface TargetResult {
  readonly target: Target;
  /** The median over rounds of the per-round value. */
  readonly value: number | undefined;
  readonly met: boolean | undefined;
}

export function judge(rounds: readonly ReadonlyMap<string, Sample>[]): TargetResult[] {
  return TARGETS.map((target) => {
    const values = rounds.map((r) => target.value(r)).filter((v): v is number => v !== undefined);
    if (values.length === 0) return { target, value: undefined, met: undefined };
    const value = median(values);
    const met =
      target.kind === 'at-most'
        ? value <= target.limit + 1e-9
        : target.kind === 'below'
          ? value < target.limit
          : target.kind === 'at-least'
            ? value >= target.limit
            : Math.abs(value - target.limit) < 1e-9;
    return { target, value, met };
  });
}

export interface CaseSummary {
  readonly id: string;
  readonly label: string;
  readonly unit: string;
  readonly rounds: number;
  readonly perSecond: number;
  readonly p50ms: number;
  readonly p99ms: number;
  readonly commitsPerUnit?: number;
  readonly walBytesPerUnit?: number;
  readonly clientCpuMsPerUnit?: number;
  readonly serverCpuMsPerUnit?: number;
}

export function summarise(cases: readonly BenchCase[], samples: readonly Sample[]): CaseSummary[] {
  return cases.flatMap((c) => {
    const mine = samples.filter((s) => s.id === c.id);
    if (mine.length === 0) return [];
    const of = (pick: (s: Sample) => number | undefined): number | undefined => {
      const values = mine.map(pick).filter((v): v is number => v !== undefined);
      return values.length === 0 ? undefined : median(values);
    };
    const commits = of((s) => s.commitsPerUnit);
    const wal = of((s) => s.walBytesPerUnit);
    const clientCpu = of((s) => s.clientCpuMsPerUnit);
    const serverCpu = of((s) => s.serverCpuMsPerUnit);
    return [
      {
        id: c.id,
        label: c.label,
        unit: c.unit,
        rounds: mine.length,
        perSecond: of((s) => s.perSecond)!,
        p50ms: of((s) => s.p50ms)!,
        p99ms: of((s) => s.p99ms)!,
        ...(commits === undefined ? {} : { commitsPerUnit: commits }),
        ...(wal === undefined ? {} : { walBytesPerUnit: wal }),
        ...(clientCpu === undefined ? {} : { clientCpuMsPerUnit: clientCpu }),
        ...(serverCpu === undefined ? {} : { serverCpuMsPerUnit: serverCpu }),
      },
    ];
  });
}

export interface Environment {
  readonly date: string;
  readonly machine: string;
  readonly node: string;
  readonly postgres: string;
  readonly durability: Readonly<Record<string, string>>;
  readonly rounds: number;
  readonly scale: number;
  readonly seed: number;
  readonly importMs: number;
}

const fmt = (n: number | undefined, digits = 2): string =>
  n === undefined || Number.isNaN(n) ? '–' : n >= 100 ? String(Math.round(n)) : n.toFixed(digits);

function shownValue(result: TargetResult): string {
  const { value, target } = result;
  if (value === undefined) return 'not measured';
  if (target.unit === '%') return `${fmt(value, 0)}%`;
  if (target.unit === 'commits') return `${fmt(value, 2)} commits`;
  return `${fmt(value, 2)}×`;
}

function shortfall(result: TargetResult): string {
  const { value, target, met } = result;
  if (value === undefined) return 'the case did not run';
  if (met === true) return 'met';
  const by =
    target.unit === 'commits'
      ? `${fmt(value - target.limit, 2)} commits over`
      : target.unit === '%'
        ? `${fmt(target.limit - value, 0)} points short`
        : `${fmt((value / target.limit - 1) * 100, 0)}% over`;
  return `**missed**, ${by}${target.whenMissed === undefined ? '' : `: ${target.whenMissed}`}`;
}

/** docs/benchmarks.md: how it was measured, the targets, and every case's figures. */
export function markdown(
  env: Environment,
  summaries: readonly CaseSummary[],
  results: readonly TargetResult[],
  storage?: StorageReport,
): string {
  const lines: string[] = [];
  lines.push('# Benchmarks', '');
  lines.push(
    '`npm run bench` writes this page and `docs/benchmarks.json`. Every case runs once per round on a',
    'fresh database (or SQLite file), in an order shuffled anew each round; each figure is the median',
    'over the rounds, and each ratio is taken within a round (both sides measured minutes apart at',
    'most, on the same server) before its median is taken. Commits are write transactions counted',
    'on the server (transaction ids assigned, so a read-only statement counts none) and WAL bytes the',
    'distance the WAL moved, both divided by the case’s units; the server is otherwise idle, so',
    'they are the case’s own. PostgreSQL comes from `DATABASE_URL` (else an embedded server is',
    'started, `fsync=off`: its figures are not durable ones). `BENCH_ROUNDS` (default 5) and',
    '`BENCH_SCALE` (default 1, the operation counts) change the run; `BENCH_REPORT_ONLY=1` writes this',
    'page again from `docs/benchmarks.json` without measuring.',
    '',
  );
  lines.push('## Where it ran', '');
  lines.push(`- ${env.date}; ${env.machine}; Node ${env.node}`);
  lines.push(
    `- PostgreSQL ${env.postgres} on loopback: ${Object.entries(env.durability)
      .map(([k, v]) => `\`${k}=${v}\``)
      .join(', ')}`,
  );
  lines.push(`- ${env.rounds} rounds, scale ${env.scale}, shuffle seed ${env.seed}`);
  lines.push(
    `- importing the package (\`import('oncely')\` in a fresh process): ${fmt(env.importMs, 0)} ms (median)`,
    '',
  );
  lines.push('## Targets', '');
  lines.push('| target | figure | verdict |', '| --- | --- | --- |');
  for (const r of results) lines.push(`| ${r.target.says} | ${shownValue(r)} | ${shortfall(r)} |`);
  lines.push('');
  lines.push(
    `A run-loop step's own figures are those of a run of ${LOOP_STEPS} steps less a run whose model answers`,
    'at once (`pg.run.empty`: its start, claimed as it is created, and its answer), divided by the steps.',
    '',
  );
  lines.push('## Every case', '');
  lines.push(
    'Per unit (a write, a read, a call, a step or a run, as the case says); p50 and p99 over one',
    'round’s operations, then the median over rounds. CPU is milliseconds per unit: the benchmark’s',
    'own process (all its threads, user and system time; the peers run in it too) and every process of',
    'the PostgreSQL server (read from `/proc`, in ticks of 10 ms summed over the case).',
    '',
  );
  lines.push(
    '| case | unit | per second | p50 ms | p99 ms | commits | WAL bytes | CPU ms, client | CPU ms, server |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  );
  for (const s of summaries) {
    lines.push(
      `| ${s.label} (\`${s.id}\`) | ${s.unit} | ${fmt(s.perSecond, 0)} | ${fmt(s.p50ms)} | ${fmt(s.p99ms)} | ${fmt(
        s.commitsPerUnit,
      )} | ${fmt(s.walBytesPerUnit, 0)} | ${fmt(s.clientCpuMsPerUnit, 3)} | ${fmt(s.serverCpuMsPerUnit, 3)} |`,
    );
  }
  lines.push('');
  if (storage !== undefined) lines.push(...storageMarkdown(storage));
  return lines.join('\n');
}
