/**
 * Many workers (issue: wake-ups without polling, throughput past the single-run floor): how long an
 * idle worker takes to start a queued run — woken by LISTEN/NOTIFY, by Redis, or by its own poll —
 * and how many guarded calls per second two `oncely worker` processes make together, beside
 * PostgreSQL's own multi-client commit rate measured in the same run. Part of `npm run bench`
 * (section "Many workers" of docs/benchmarks.md).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import {
  defineAgent,
  openRuntime,
  openStore,
  scriptedModel,
  type Runtime,
  type Store,
} from '../src/index.js';
import { initialMessages } from '../src/runs/messages.js';
import { RedisWakeups, publishingWakeups } from '../src/store/redis-wakeups.js';
import { startWorker } from '../src/worker/index.js';

const TENANT = 'bench';
const WAKE_SAMPLES = 25;
const POLL_MS = 1_000;
const CLUSTER_WORKERS = 2;
/** Runs in flight at once across the workers. */
const CLUSTER_CONCURRENT = 64;
/** Runs queued in all: ten rounds of the concurrent runs. */
const CLUSTER_RUNS = Number(process.env.BENCH_CLUSTER_RUNS ?? 640);
const CALLS_PER_RUN = 10;
/** Times each setting is measured (interleaved, so a drift of the machine meets them all alike). */
const CLUSTER_REPEATS = Number(process.env.BENCH_CLUSTER_REPEATS ?? 3);
/** Runs driven before the measured ones (then ANALYZE), so the measurement starts warm. */
const WARMUP_RUNS = Number(process.env.BENCH_CLUSTER_WARMUP ?? 256);
/**
 * The other shape (one call per step): runs of ten steps of one call each, as many as run at once, measured
 * on workers just started (cold) and again after a warm-up (warm).
 */
const STEPWISE_RUNS = Number(process.env.BENCH_CLUSTER_STEPWISE_RUNS ?? CLUSTER_CONCURRENT);
/** Goals (calls per second on this machine): one step of ten calls, and ten steps of one call. */
const GOAL_ONE_STEP = 5_000;
const GOAL_ONE_CALL_PER_STEP = 1_500;
/**
 * Node options for the worker processes, space-separated: `BENCH_CLUSTER_WORKER_NODE_ARGS='--cpu-prof
 * --cpu-prof-dir=/tmp/prof'` profiles them (options Node refuses in NODE_OPTIONS).
 */
const WORKER_NODE_ARGS = (process.env.BENCH_CLUSTER_WORKER_NODE_ARGS ?? '')
  .split(' ')
  .filter((a) => a !== '');
const COMMIT_CLIENTS = 8;
const COMMIT_SECONDS = 3;
const ROOT = fileURLToPath(new URL('../', import.meta.url));

export interface WakeResult {
  readonly mode: string;
  readonly samples: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
}

export interface ClusterResult {
  /** Whether the workers grouped their step writes across runs (group commit) or sent each alone. */
  readonly groupCommit: boolean;
  /** Connections of each of a worker's two pools (ONCELY_PG_POOL_SIZE; the default is 10). */
  readonly poolSize: number;
  readonly workers: number;
  readonly runs: number;
  readonly callsPerRun: number;
  /** Calls the model asks in one step: all ten at once (10), or one a step (1). Absent: 10. */
  readonly callsPerStep?: number;
  /** Whether the workers had driven a warm-up batch first (warm) or had just started (cold). */
  readonly start?: 'cold' | 'warm';
  readonly seconds: number;
  readonly callsPerSecond: number;
  readonly commitsPerSecond: number;
  /** PostgreSQL's own rate of one-row commits from COMMIT_CLIENTS clients, in the same run. */
  readonly floorCommitsPerSecond: number;
  /** Shares of the machine's CPU time over the run (all cores = 1): all of it, and the workers'. */
  readonly cpu: { readonly machine: number; readonly workers: number };
  /** CPU milliseconds a guarded call over the run: the whole machine's (busy), and the two workers'. */
  readonly cpuMsPerCall?: { readonly machine: number; readonly workers: number };
  /** Guarded calls per second of every repeat of this setting; the figures above are the median's. */
  readonly repeats?: readonly number[];
}

export interface ClusterReport {
  readonly wakeups: readonly WakeResult[];
  /** The same load: each step write alone, grouped (the default), grouped on smaller pools. */
  readonly throughput?: readonly ClusterResult[];
  /** One call per step (ten steps a run), group commit and pools of 10: cold workers, then warm. */
  readonly oneCallPerStep?: { readonly cold: ClusterResult; readonly warm: ClusterResult };
}

type Fresh = () => Promise<{ url: string; drop(): Promise<void> }>;

const quantile = (values: readonly number[], q: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
};

/** From `startRun` returning to the model being asked: the claim latency of an idle worker. */
async function wakeLatency(
  url: string,
  mode: 'listen' | 'redis' | 'polling',
  redisUrl: string | undefined,
): Promise<WakeResult> {
  const asked = new Map<string, number>();
  const agent = defineAgent({
    name: 'wake',
    instructions: 'answer',
    model: scriptedModel((prompt) => {
      const user = JSON.stringify(prompt.find((m) => m.role === 'user')?.content ?? '');
      const runId = /wake_\d+/.exec(user)?.[0];
      if (runId !== undefined && !asked.has(runId)) asked.set(runId, performance.now());
      return { text: 'ok' };
    }),
    tools: [],
  });
  const redis = mode === 'redis' && redisUrl !== undefined ? await RedisWakeups.open(redisUrl) : undefined;
  const wrap = (s: Store): Store => (redis === undefined ? s : publishingWakeups(s, redis));
  // The worker's process and the API's: two stores, as two processes would have.
  const workerStore = wrap(await openStore(url, { migrate: true }));
  const apiStore = wrap(await openStore(url));
  const workerRuntime: Runtime = await openRuntime({
    store: workerStore,
    agents: [agent],
    owner: 'bench-worker',
  });
  const api: Runtime = await openRuntime({ store: apiStore, agents: [agent], owner: 'bench-api' });
  const worker = startWorker(workerRuntime, { pollMs: POLL_MS, wakeups: mode !== 'polling' });
  const latencies: number[] = [];
  try {
    await new Promise((resolve) => setTimeout(resolve, 500)); // listening, and its first look done
    for (let i = 0; i < WAKE_SAMPLES; i++) {
      const runId = `wake_${i}`;
      // A random moment against the poll's phase.
      await new Promise((resolve) => setTimeout(resolve, 50 + Math.random() * 150));
      const started = performance.now();
      await api.startRun({ tenantId: TENANT, agent: 'wake', input: runId, runId });
      for (let waited = 0; !asked.has(runId) && waited < 10_000; waited += 2) {
        await new Promise((resolve) => setTimeout(resolve, 2));
      }
      const at = asked.get(runId);
      if (at !== undefined) latencies.push(at - started);
    }
  } finally {
    await worker.stop();
    await workerRuntime.close();
    await api.close();
    await workerStore.close();
    await apiStore.close();
  }
  return {
    mode:
      mode === 'listen'
        ? 'PostgreSQL LISTEN/NOTIFY'
        : mode === 'redis'
          ? 'Redis pub/sub'
          : `polling only (every ${POLL_MS} ms)`,
    samples: latencies.length,
    p50Ms: quantile(latencies, 0.5),
    p99Ms: quantile(latencies, 0.99),
  };
}

/** Transactions committed so far on the server (the next transaction id). */
async function xid(admin: pg.Client): Promise<bigint> {
  const { rows } = await admin.query<{ xid: string }>(
    'SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS xid',
  );
  return BigInt(rows[0]!.xid);
}

/** PostgreSQL's own multi-client commit rate: one-row inserts, each its own transaction. */
async function commitFloor(url: string): Promise<number> {
  const setup = new pg.Client({ connectionString: url });
  await setup.connect();
  await setup.query(
    'CREATE TABLE IF NOT EXISTS bench_commits (id bigserial PRIMARY KEY, at timestamptz DEFAULT now())',
  );
  await setup.end();
  const until = performance.now() + COMMIT_SECONDS * 1000;
  const counts = await Promise.all(
    Array.from({ length: COMMIT_CLIENTS }, async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      let n = 0;
      try {
        while (performance.now() < until) {
          await client.query('INSERT INTO bench_commits DEFAULT VALUES');
          n += 1;
        }
      } finally {
        await client.end();
      }
      return n;
    }),
  );
  return counts.reduce((a, b) => a + b, 0) / COMMIT_SECONDS;
}

/** CPU ticks (Linux /proc): the machine's busy and total, and the worker processes' own. */
function cpuNow(workers: readonly ChildProcess[]): { busy: number; total: number; workers: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = fields.reduce((a, b) => a + b, 0);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  let own = 0;
  for (const w of workers) {
    try {
      const stat = readFileSync(`/proc/${w.pid}/stat`, 'utf8');
      const after = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      own += Number(after[11]) + Number(after[12]); // utime, stime
    } catch {
      // gone
    }
  }
  // /proc/stat counts each core's ticks; a process's ticks are of one core at a time.
  return { busy: total - idle, total, workers: own * (fields.length > 0 ? 1 : 0) };
}

function worker(url: string, setting: ClusterSetting): ChildProcess {
  const child = spawn(
    process.execPath,
    [
      ...WORKER_NODE_ARGS,
      `${ROOT}dist/cli/main.js`,
      'worker',
      '-c',
      `${ROOT}bench/cluster-fixture/oncely.yaml`,
      '--database-url',
      url,
      '--concurrency',
      String(CLUSTER_CONCURRENT / CLUSTER_WORKERS),
      '--poll-ms',
      '100',
    ],
    {
      cwd: ROOT,
      stdio: ['ignore', 'ignore', 'pipe'],
      env: {
        ...process.env,
        ONCELY_LOG_LEVEL: 'warn',
        ONCELY_PG_GROUP_COMMIT: setting.groupCommit ? '' : 'off',
        ONCELY_PG_POOL_SIZE: String(setting.poolSize),
      },
    },
  );
  child.stderr?.resume();
  return child;
}

/**
 * Two worker processes, 64 runs at once between them, 640 runs of ten calls queued at once: guarded
 * calls per second, commits, and the machine's CPU over the run.
 */
export interface ClusterSetting {
  readonly groupCommit: boolean;
  readonly poolSize: number;
}

/** The settings the throughput is measured with, side by side. */
export const CLUSTER_SETTINGS: readonly ClusterSetting[] = [
  { groupCommit: false, poolSize: 10 },
  { groupCommit: true, poolSize: 10 },
  { groupCommit: true, poolSize: 3 },
];

/**
 * Queues `count` runs in one transaction (so they appear at once, as a burst of work would; `inside`
 * runs in it last) and waits until all of them completed. The moment after the commit.
 */
async function queueAndWait(
  store: Store,
  admin: pg.Client,
  prefix: string,
  count: number,
  agent: 'ten' | 'one',
  inside?: () => Promise<void>,
): Promise<number> {
  await store.transaction(async (tx) => {
    for (let i = 0; i < count; i++) {
      await tx.runs.create({
        tenantId: TENANT,
        runId: `${prefix}_${i}`,
        agent,
        input: 'go',
        checkpoint: { messages: initialMessages('go'), step: 0, pending: null },
      });
    }
    await inside?.();
  });
  const started = performance.now();
  for (let waited = 0; waited < 300_000; waited += 20) {
    const { rows } = await admin.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM runs WHERE tenant_id = $1 AND run_id LIKE $2 AND status = 'completed'`,
      [TENANT, `${prefix}\\_%`],
    );
    if (Number(rows[0]?.n) === count) return started;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`${count} ${prefix} runs did not complete within 300 s`);
}

/** The figures of one measured batch (no PostgreSQL floor: the caller adds it). */
type Batch = Omit<ClusterResult, 'groupCommit' | 'poolSize' | 'floorCommitsPerSecond' | 'repeats'>;

/**
 * Queues `count` runs of `agent` at once on running workers and measures them: wall time from the
 * queueing commit to the last run completed, the server's commits, and the machine's and workers' CPU.
 */
async function measuredBatch(
  store: Store,
  admin: pg.Client,
  workers: readonly ChildProcess[],
  prefix: string,
  count: number,
  agent: 'ten' | 'one',
  start: 'cold' | 'warm',
): Promise<Batch> {
  let xidBefore = 0n;
  let cpuBefore = cpuNow(workers);
  // Read inside the queueing transaction, so the commits and CPU counted are the runs' own.
  const started = await queueAndWait(store, admin, prefix, count, agent, async () => {
    xidBefore = await xid(admin);
    cpuBefore = cpuNow(workers);
  });
  const seconds = (performance.now() - started) / 1000;
  const cpu = cpuNow(workers);
  const commits = Number((await xid(admin)) - xidBefore);
  const calls = count * CALLS_PER_RUN;
  const machine = (cpu.busy - cpuBefore.busy) / (cpu.total - cpuBefore.total);
  const own = (cpu.workers - cpuBefore.workers) / (cpu.total - cpuBefore.total);
  // A share of all cores' time over the run, as milliseconds a call: share × cores × wall time / calls.
  const perCall = (share: number): number => (share * cpus().length * seconds * 1000) / calls;
  return {
    workers: CLUSTER_WORKERS,
    runs: count,
    callsPerRun: CALLS_PER_RUN,
    callsPerStep: agent === 'one' ? 1 : CALLS_PER_RUN,
    start,
    seconds,
    callsPerSecond: calls / seconds,
    commitsPerSecond: commits / seconds,
    cpu: { machine, workers: own },
    cpuMsPerCall: { machine: perCall(machine), workers: perCall(own) },
  };
}

async function stopWorkers(workers: readonly ChildProcess[]): Promise<void> {
  for (const w of workers) w.kill('SIGTERM');
  await Promise.all(
    workers.map(
      (w) => new Promise((resolve) => (w.exitCode === null ? w.once('exit', resolve) : resolve(null))),
    ),
  );
}

/**
 * Waits until every worker process has opened its runtime and written its first heartbeat (its row in
 * `workers`), and at least the pause the other measurements give them to start and listen.
 */
async function untilWorkersUp(admin: pg.Client): Promise<void> {
  const pause = new Promise((resolve) => setTimeout(resolve, 2_500));
  for (let waited = 0; ; waited += 50) {
    const { rows } = await admin.query<{ n: string }>('SELECT count(*)::text AS n FROM workers');
    if (Number(rows[0]?.n) >= CLUSTER_WORKERS) break;
    if (waited > 60_000) throw new Error(`${CLUSTER_WORKERS} workers did not start within 60 s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await pause;
}

/** One step of ten calls a run: a warm-up batch, ANALYZE, then the measured runs and the floor. */
export async function throughput(
  url: string,
  setting: ClusterSetting = { groupCommit: true, poolSize: 10 },
): Promise<ClusterResult> {
  const store = await openStore(url, { migrate: true });
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const workers = Array.from({ length: CLUSTER_WORKERS }, () => worker(url, setting));
  try {
    await new Promise((resolve) => setTimeout(resolve, 2_500)); // the workers start and listen
    // A warm-up batch first, then statistics: the measured runs meet workers and a database in their
    // steady state (code compiled, hot statements planned again on tables that hold rows, tables
    // analyzed as autovacuum would have), not the first seconds of a new database.
    await queueAndWait(store, admin, 'warmup', WARMUP_RUNS, 'ten');
    await admin.query('ANALYZE');
    const batch = await measuredBatch(store, admin, workers, 'cluster', CLUSTER_RUNS, 'ten', 'warm');
    const floor = await commitFloor(url);
    return { ...setting, ...batch, floorCommitsPerSecond: floor };
  } finally {
    await stopWorkers(workers);
    await admin.end();
    await store.close();
  }
}

/**
 * One call per step: STEPWISE_RUNS runs of ten steps of one call, all in flight at once, on the
 * default setting. First on workers just started and a new database (cold), then again after a
 * warm-up batch of the same shape and ANALYZE (warm), as `throughput` measures.
 */
export async function oneCallPerStep(url: string): Promise<{ cold: ClusterResult; warm: ClusterResult }> {
  const setting: ClusterSetting = { groupCommit: true, poolSize: 10 };
  const store = await openStore(url, { migrate: true });
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const workers = Array.from({ length: CLUSTER_WORKERS }, () => worker(url, setting));
  try {
    // Cold is a worker that has started and driven nothing yet, not one still starting: on a busy
    // machine a process may take longer than the pause to load its code and open its runtime.
    await untilWorkersUp(admin);
    const cold = await measuredBatch(store, admin, workers, 'cold', STEPWISE_RUNS, 'one', 'cold');
    await queueAndWait(store, admin, 'warmup', WARMUP_RUNS, 'one');
    await admin.query('ANALYZE');
    const warm = await measuredBatch(store, admin, workers, 'warm', STEPWISE_RUNS, 'one', 'warm');
    // No floor of its own: the shape asks fewer commits a second than the other, whose floor stands.
    return {
      cold: { ...setting, ...cold, floorCommitsPerSecond: Number.NaN },
      warm: { ...setting, ...warm, floorCommitsPerSecond: Number.NaN },
    };
  } finally {
    await stopWorkers(workers);
    await admin.end();
    await store.close();
  }
}

export async function measureCluster(
  fresh: Fresh,
  progress: (message: string) => void,
): Promise<ClusterReport> {
  const redisUrl = process.env.REDIS_URL || undefined;
  const wakeups: WakeResult[] = [];
  for (const mode of ['listen', 'redis', 'polling'] as const) {
    if (mode === 'redis' && redisUrl === undefined) {
      progress('many workers: no REDIS_URL, Redis wake-ups not measured');
      continue;
    }
    progress(`many workers: wake-up latency, ${mode}`);
    const db = await fresh();
    try {
      wakeups.push(await wakeLatency(db.url, mode, redisUrl));
    } finally {
      await db.drop();
    }
  }
  progress(
    `many workers: ${CLUSTER_WORKERS} worker processes, ${CLUSTER_RUNS} runs of ${CALLS_PER_RUN} calls`,
  );
  const measured: ClusterResult[][] = CLUSTER_SETTINGS.map(() => []);
  const cold: ClusterResult[] = [];
  const warm: ClusterResult[] = [];
  for (let round = 1; round <= CLUSTER_REPEATS; round++) {
    for (const [i, setting] of CLUSTER_SETTINGS.entries()) {
      progress(`many workers: throughput, ${settingName(setting)} (${round} of ${CLUSTER_REPEATS})`);
      const db = await fresh();
      try {
        measured[i]?.push(await throughput(db.url, setting));
      } finally {
        await db.drop();
      }
    }
    progress(
      `many workers: throughput, ${STEPWISE_RUNS} runs of ${CALLS_PER_RUN} steps of one call, cold then warm (${round} of ${CLUSTER_REPEATS})`,
    );
    const db = await fresh();
    try {
      const shape = await oneCallPerStep(db.url);
      cold.push(shape.cold);
      warm.push(shape.warm);
    } finally {
      await db.drop();
    }
  }
  return {
    wakeups,
    throughput: measured.map(medianOf),
    oneCallPerStep: { cold: medianOf(cold), warm: medianOf(warm) },
  };
}

/** The median repeat's figures, with every repeat's calls per second. */
function medianOf(runs: readonly ClusterResult[]): ClusterResult {
  const sorted = [...runs].sort((a, b) => a.callsPerSecond - b.callsPerSecond);
  const median = sorted[Math.floor((sorted.length - 1) / 2)]!;
  return { ...median, repeats: runs.map((r) => r.callsPerSecond) };
}

function settingName(t: ClusterSetting): string {
  return `${t.groupCommit ? 'group commit' : 'each write alone'}, pools of ${t.poolSize}`;
}

const fmt = (n: number, digits = 1): string => (Number.isFinite(n) ? n.toFixed(digits) : '-');

/** The "Many workers" section of docs/benchmarks.md. */
export function clusterMarkdown(report: ClusterReport): string[] {
  const lines = ['## Many workers', ''];
  lines.push(
    `Wake-up: an idle worker (polling every ${POLL_MS} ms) and an API runtime, each with its own connections to`,
    `one PostgreSQL; ${WAKE_SAMPLES} runs queued one at a time at random moments; the figure is from \`startRun\``,
    'returning to the worker asking the model (claim and checkpoint read included). Target: p50 within 50 ms.',
    '',
    '| woken by | samples | p50 ms | p99 ms |',
    '| --- | --- | --- | --- |',
  );
  for (const w of report.wakeups)
    lines.push(`| ${w.mode} | ${w.samples} | ${fmt(w.p50Ms)} | ${fmt(w.p99Ms)} |`);
  const pushed = report.wakeups.filter((w) => !w.mode.startsWith('polling'));
  lines.push(
    '',
    'Polling alone comes close to the whole interval: a worker naps for the interval after each run it',
    'finishes, and the next run was queued soon after.',
    '',
    `Target (p50 within 50 ms with wake-ups): ${pushed.length > 0 && pushed.every((w) => w.p50Ms <= 50) ? 'met' : 'missed'}.`,
  );
  lines.push('');
  const runs = report.throughput ?? [];
  const first = runs[0];
  if (first !== undefined) {
    const cell = (f: (t: ClusterResult) => string): string => runs.map(f).join(' | ');
    const best = Math.max(...runs.map((t) => t.callsPerSecond));
    const spread = Math.max(
      ...runs.map((t) => {
        const all = t.repeats ?? [t.callsPerSecond];
        return (Math.max(...all) - Math.min(...all)) / t.callsPerSecond;
      }),
    );
    lines.push(
      `Throughput: ${first.workers} \`oncely worker\` processes (${CLUSTER_CONCURRENT / CLUSTER_WORKERS} runs each at once, ${CLUSTER_CONCURRENT} in all), ${first.runs} runs`,
      `of one step of ${first.callsPerRun} write calls (then an answer), queued in one transaction; from their commit to the`,
      "last run completed. Commits are the server's transaction ids over that time. Three settings, each on",
      'a new database: the step writes sent one statement each (`ONCELY_PG_GROUP_COMMIT=off`), then grouped',
      'across runs (the default), both with the default pools (10 connections each, two pools a process);',
      'then grouped, with pools of 3 (`ONCELY_PG_POOL_SIZE=3`, sized to a server of two cores). Each starts',
      `warm, as a deployment that has been running does: the workers first drive ${WARMUP_RUNS} runs (their code compiled,`,
      'their statements prepared and planned again on tables that hold rows, prepared.ts), then the tables are',
      'analyzed (as autovacuum does once they have filled), then the measured runs are queued.',
      `Each setting is measured ${CLUSTER_REPEATS} times, the settings in turn; the figures are those of the`,
      "median repeat, and one row gives each repeat's guarded calls per second. Beside each, PostgreSQL's own rate of",
      `one-row commits from ${COMMIT_CLIENTS} clients on the same server, measured right after. Goal: ${GOAL_ONE_STEP.toLocaleString('en-US')} guarded calls`,
      'per second on this machine.',
      '',
      `| figure | ${cell(settingName)} |`,
      `| --- | ${cell(() => '---')} |`,
      `| wall time | ${cell((t) => `${fmt(t.seconds, 2)} s`)} |`,
      `| guarded calls per second | ${cell((t) => fmt(t.callsPerSecond, 0))} |`,
      `| guarded calls per second, each repeat | ${cell((t) => (t.repeats ?? [t.callsPerSecond]).map((r) => fmt(r, 0)).join(', '))} |`,
      `| commits per second (oncely's) | ${cell((t) => fmt(t.commitsPerSecond, 0))} |`,
      `| guarded calls per commit | ${cell((t) => fmt(t.callsPerSecond / t.commitsPerSecond, 2))} |`,
      `| commits per second (PostgreSQL, ${COMMIT_CLIENTS} clients, one row each) | ${cell((t) => fmt(t.floorCommitsPerSecond, 0))} |`,
      `| machine CPU busy over the run (both cores = 100%) | ${cell((t) => `${fmt(t.cpu.machine * 100, 0)}%`)} |`,
      `| of which the two workers | ${cell((t) => `${fmt(t.cpu.workers * 100, 0)}%`)} |`,
      '',
      `Goal (${GOAL_ONE_STEP.toLocaleString('en-US')} guarded calls per second): ${best >= GOAL_ONE_STEP ? 'met' : 'missed'}. The repeats of one setting differ by up to ${fmt(spread * 100, 0)}% of their median.`,
      '',
      runs.every((t) => t.cpu.machine >= 0.9)
        ? "Every run is bound by the machine's two cores (PostgreSQL, both workers and the bench share them), not by commits: PostgreSQL commits many times more per second than the runs ask of it. Group commit sends the step writes that meet in a worker as one statement; here a step write takes a few milliseconds, so few meet and the saving is in commits, not in time (where a commit takes longer, on a disk that syncs slowly or a server across a network, more writes wait behind each one and share it)."
        : 'The machine had CPU to spare over a run.',
      '',
    );
  }
  lines.push(...shapesMarkdown(report));
  return lines;
}

/**
 * Why a shape's figure fell short of its goal, from what was measured: either the machine's cores were
 * busy (and the CPU a call cost bounds the rate), or they were not (and the runs waited).
 */
function missReason(t: ClusterResult, goal: number): string {
  if (t.callsPerSecond >= goal) return 'met';
  const cores = cpus().length;
  const perCall = t.cpuMsPerCall;
  if (t.cpu.machine >= 0.9 && perCall !== undefined) {
    return (
      `missed: bound by CPU. The machine's ${cores} cores were ${fmt(t.cpu.machine * 100, 0)}% busy; a call cost ` +
      `${fmt(perCall.machine, 2)} ms of CPU in all (the workers ${fmt(perCall.workers, 2)} ms, the rest of the machine — ` +
      `PostgreSQL, the bench — ${fmt(perCall.machine - perCall.workers, 2)} ms), so ${cores} cores allow at most ` +
      `${fmt((cores * 1000) / perCall.machine, 0)} calls per second; ${goal.toLocaleString('en-US')} needs at most ` +
      `${fmt((cores * 1000) / goal, 2)} ms a call`
    );
  }
  return (
    `missed, with CPU to spare (the machine ${fmt(t.cpu.machine * 100, 0)}% busy): the runs waited, ` +
    `${fmt(t.commitsPerSecond / t.callsPerSecond, 2)} commits a call at ${fmt(t.commitsPerSecond, 0)} commits per second`
  );
}

/** Both shapes beside each other, with their goals: one step of ten calls, and one call per step. */
function shapesMarkdown(report: ClusterReport): string[] {
  const ten = report.throughput?.find((t) => t.groupCommit && t.poolSize === 10);
  const stepwise = report.oneCallPerStep;
  if (ten === undefined || stepwise === undefined) return [];
  const rows: [string, ClusterResult, number][] = [
    [
      `${stepwise.cold.runs} runs × 10 calls, one call per step, cold workers`,
      stepwise.cold,
      GOAL_ONE_CALL_PER_STEP,
    ],
    [
      `${stepwise.warm.runs} runs × 10 calls, one call per step, warm workers`,
      stepwise.warm,
      GOAL_ONE_CALL_PER_STEP,
    ],
    [`${ten.runs} runs × one step of 10 calls, warm workers`, ten, GOAL_ONE_STEP],
  ];
  const lines = [
    'Throughput by shape: the same two worker processes (group commit, pools of 10) on runs of ten write',
    'calls asked in two ways. One call per step is ten steps a run, each a model turn and its call, so a',
    `call carries a whole step's work; ${stepwise.warm.runs} runs, all in flight at once, queued on workers just`,
    `started and a new database (cold), then again after a warm-up of ${WARMUP_RUNS} runs of the same shape and`,
    'ANALYZE (warm). One step of ten calls is the setting above. Figures of the median of',
    `${CLUSTER_REPEATS} repeats; CPU a call is the share of all cores' time over the run, as milliseconds, per call.`,
    '',
    '| shape | guarded calls per second | each repeat | commits per second | worker CPU ms a call | machine CPU ms a call | goal | verdict |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const [name, t, goal] of rows) {
    lines.push(
      `| ${name} | ${fmt(t.callsPerSecond, 0)} | ${(t.repeats ?? [t.callsPerSecond]).map((r) => fmt(r, 0)).join(', ')} | ${fmt(t.commitsPerSecond, 0)} | ${fmt(t.cpuMsPerCall?.workers ?? Number.NaN, 2)} | ${fmt(t.cpuMsPerCall?.machine ?? Number.NaN, 2)} | ≥ ${goal.toLocaleString('en-US')} | ${t.callsPerSecond >= goal ? 'met' : 'missed'} |`,
    );
  }
  lines.push('');
  for (const [name, t, goal] of rows) lines.push(`- ${name}: ${missReason(t, goal)}.`);
  lines.push('');
  return lines;
}
