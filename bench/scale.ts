/**
 * Run storage at scale (PostgreSQL): 1,000,000 ledger rows and 300,000 runs, written with
 * generate_series as the store would hold them, then analyzed (as autovacuum would). Measured: a
 * claim, the unknown-calls page, a reservation beside the same on an empty database, a `/metrics`
 * scrape, a sweep pass over 10,000 waiting runs, and the memory of a process making that pass.
 * Part of `npm run bench` (section "Run storage at scale" of docs/benchmarks.md).
 */
import { execFileSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { ApiMetrics } from '../src/api/index.js';
import { argsDigest, openStore, type Store } from '../src/index.js';
import type { ReserveRequest } from '../src/store/index.js';
import { median, quantile } from './measure.js';

export const LEDGER_ROWS = 1_000_000;
export const RUNS = 300_000;
const QUEUED = 50_000;
const LIVE = 10_000;
const WAITING = 10_000;
const LOST = 51;

/** What was measured at scale, medians in ms. */
export interface ScaleResult {
  readonly ledgerRows: number;
  readonly runs: number;
  readonly populateSeconds: number;
  readonly claimMs: number;
  readonly unknownPageMs: number;
  readonly unknownPageRows: number;
  readonly reserveFullMs: number;
  readonly reserveEmptyMs: number;
  readonly scrapeMs: number;
  /** The read behind a scrape, once per interval, off the scrape's path. */
  readonly countsReadMs: number;
  /** A scrape that reads the counts itself (`--metrics-interval-ms 0`): the read and the render. */
  readonly uncachedScrapeMs?: number;
  readonly sweepSeconds: number;
  readonly sweepRuns: number;
  readonly sweepRssMiB: number;
}

/** The database as a busy deployment would leave it: statuses, in-flight calls, waiting runs, history. */
export async function populate(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const message = `'{"role": "user", "content": "Credit acct_7 $25 for the late delivery"}'::jsonb`;
  const pending = `jsonb_build_object('calls', jsonb_build_array(jsonb_build_object('toolCallId', 'call_1',
    'toolName', 'issue_credit', 'input', jsonb_build_object('cents', 2500))))`;
  // Rows of runs and of calls, each group a SELECT over generate_series of the columns below.
  const runs = (select: string) =>
    client.query(`INSERT INTO runs (tenant_id, run_id, agent, status, input, step, pending, message_count,
      checkpoint_version, lease_owner, lease_epoch, lease_expires_at, created_at, updated_at) ${select}`);
  const calls = (select: string) =>
    client.query(`INSERT INTO tool_executions (tenant_id, idempotency_key, run_id, tool_call_id, tool_name,
      effect, args, args_digest, status, attempt, version, result, attempt_timeout_ms, created_at, updated_at,
      attempt_started_at, settled_at, settled_by_kind, settled_by_id) ${select}`);
  try {
    const completed = RUNS - QUEUED - LIVE - WAITING - LOST;
    await runs(`
      SELECT 'bench', 'done_' || g, 'billing', 'completed', '"x"'::jsonb, 1, NULL::jsonb, 2, 3, NULL, 1, NULL,
        oncely_now() - interval '2 days' + make_interval(secs => g), oncely_now() - interval '1 day'
      FROM generate_series(1, ${completed}) g`);
    await runs(`
      SELECT 'bench', 'queued_' || g, 'billing', 'queued', '"x"'::jsonb, 0, NULL, 2, 1, NULL, 0, NULL,
        oncely_now() - interval '1 hour', oncely_now() - interval '1 hour' + make_interval(secs => g / 100.0)
      FROM generate_series(1, ${QUEUED}) g`);
    await runs(`
      SELECT 'bench', 'live_' || g, 'billing', 'running', '"x"'::jsonb, 1, ${pending}, 2, 2, 'worker-a', 1,
        oncely_now() + interval '1 hour', oncely_now() - interval '1 minute', oncely_now() - interval '1 minute'
      FROM generate_series(1, ${LIVE}) g`);
    await runs(`
      SELECT 'bench', 'dead_' || g, 'billing', 'running', '"x"'::jsonb, 1, ${pending}, 2, 2, 'worker-b', 1,
        oncely_now() - interval '1 hour', oncely_now() - interval '2 hours', oncely_now() - interval '2 hours'
      FROM generate_series(1, ${LOST}) g`);
    await runs(`
      SELECT 'sweep', 'wait_' || g, 'billing',
        CASE WHEN g % 2 = 0 THEN 'awaiting_approval' ELSE 'awaiting_reconciliation' END,
        '"x"'::jsonb, 1, ${pending}, 2, 2, NULL, 1, NULL, oncely_now() - interval '3 hours', oncely_now() - make_interval(secs => g)
      FROM generate_series(1, ${WAITING}) g`);
    await client.query(`
      INSERT INTO run_messages (tenant_id, run_id, idx, message)
      SELECT tenant_id, run_id, i, ${message} FROM runs, generate_series(0, 1) i`);
    const settled = LEDGER_ROWS - LIVE - LOST - WAITING / 2;
    await calls(`
      SELECT 'bench', 'done_' || (g % ${completed} + 1) || ':call_' || g, 'done_' || (g % ${completed} + 1),
        'call_' || g, CASE WHEN g % 3 = 0 THEN 'send_email' ELSE 'issue_credit' END, 'write',
        '{"cents": 2500}'::jsonb, 'digest', CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'completed' END, 1, 2,
        '{"ok": true}'::jsonb, 30000, oncely_now() - interval '1 day', oncely_now() - interval '1 day',
        oncely_now() - interval '1 day' - make_interval(secs => g / 10.0), oncely_now() - interval '1 day', 'runtime', 'w'
      FROM generate_series(1, ${settled}) g`);
    await calls(`
      SELECT 'bench', 'live_' || g || ':call_1', 'live_' || g, 'call_1', 'issue_credit', 'write',
        '{"cents": 2500}'::jsonb, 'digest', 'started', 1, 1, NULL, 60000, oncely_now(), oncely_now(),
        oncely_now() - make_interval(secs => g % 30), NULL, NULL, NULL
      FROM generate_series(1, ${LIVE}) g`);
    await calls(`
      SELECT 'bench', 'dead_' || g || ':call_1', 'dead_' || g, 'call_1', 'issue_credit', 'write',
        '{"cents": 2500}'::jsonb, 'digest', 'started', 1, 1, NULL, 30000, oncely_now() - interval '2 hours',
        oncely_now() - interval '2 hours', oncely_now() - interval '2 hours' + make_interval(secs => g), NULL, NULL, NULL
      FROM generate_series(1, ${LOST}) g`);
    await calls(`
      SELECT 'sweep', 'wait_' || g || ':call_1', 'wait_' || g, 'call_1', 'issue_credit', 'write',
        '{"cents": 2500}'::jsonb, 'digest', 'indeterminate', 1, 2, NULL, 30000, oncely_now() - interval '3 hours',
        oncely_now() - interval '3 hours', oncely_now() - interval '3 hours', NULL, NULL, NULL
      FROM generate_series(1, ${WAITING}) g WHERE g % 2 = 1`);
    await client.query(`
      INSERT INTO approvals (tenant_id, idempotency_key, run_id, tool_name, args, args_digest, status, created_at)
      SELECT 'sweep', 'wait_' || g || ':call_1', 'wait_' || g, 'issue_credit', '{"cents": 2500}'::jsonb, 'digest', 'pending',
        oncely_now() - interval '3 hours'
      FROM generate_series(2, ${WAITING}, 2) g`);
    // What autovacuum would have done by now (this bench's server may run without it).
    await client.query('VACUUM ANALYZE');
  } finally {
    await client.end();
  }
}

async function timed(n: number, op: (i: number) => Promise<unknown>): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await op(i);
    times.push(performance.now() - t);
  }
  return times;
}

const p50 = (times: readonly number[]): number =>
  quantile(
    [...times].sort((a, b) => a - b),
    0.5,
  );

function reservation(tag: string, i: number): ReserveRequest {
  const args = { cents: i };
  return {
    tenantId: 'bench',
    idempotencyKey: `new_${tag}_${i}:call_1`,
    runId: `new_${tag}_${i}`,
    toolCallId: 'call_1',
    toolName: 'issue_credit',
    effect: 'write',
    args,
    argsDigest: argsDigest(args),
    compensationOf: null,
    attemptTimeoutMs: 30_000,
  };
}

/** A sweep pass over every waiting run in a process of its own: its time, runs seen and memory. */
function sweepInChild(url: string): { seconds: number; runs: number; rssMiB: number } {
  const child = fileURLToPath(new URL('./scale-sweep.ts', import.meta.url));
  const out = execFileSync(process.execPath, ['--import', 'tsx', child, url], { encoding: 'utf8' });
  return JSON.parse(out.trim().split('\n').at(-1)!) as { seconds: number; runs: number; rssMiB: number };
}

export async function measureScale(
  fresh: () => Promise<{ url: string; drop(): Promise<void> }>,
  progress: (message: string) => void,
): Promise<ScaleResult> {
  const full = await fresh();
  const empty = await fresh();
  let fullStore: Store | undefined;
  let emptyStore: Store | undefined;
  try {
    fullStore = await openStore(full.url, { migrate: true });
    emptyStore = await openStore(empty.url, { migrate: true });
    progress(
      `run storage at scale: writing ${LEDGER_ROWS.toLocaleString('en')} ledger rows and ${RUNS.toLocaleString('en')} runs`,
    );
    const t0 = performance.now();
    await populate(full.url);
    const populateSeconds = (performance.now() - t0) / 1000;
    const store = fullStore;
    progress('run storage at scale: claims, unknown-calls pages, reservations, scrapes');
    // The unknown calls first: the claims below take the dead worker's runs over (a live lease again).
    let rows = 0;
    const pages = await timed(200, async () => {
      rows = (await store.monitor.unknownCalls('bench', { limit: 50, marginMs: 5_000 })).length;
    });
    const claims = await timed(200, async () => {
      if ((await store.runs.claimNext('bench-worker', 600_000)) === undefined)
        throw new Error('nothing to claim');
    });
    // Side by side: one reservation on the full database, one on an empty one, in turn.
    const onFull: number[] = [];
    const onEmpty: number[] = [];
    for (let i = 0; i < 300; i++) {
      for (const [s, times, tag] of [
        [store, onFull, 'full'],
        [emptyStore, onEmpty, 'empty'],
      ] as const) {
        const t = performance.now();
        await s.ledger.reserve([reservation(tag, i)], { kind: 'runtime', id: 'bench' });
        times.push(performance.now() - t);
      }
    }
    const metrics = new ApiMetrics({ defaultMetrics: false, minReadIntervalMs: 5_000 });
    const readStart = performance.now();
    await metrics.render(store); // the first scrape waits for the first read
    const countsReadMs = performance.now() - readStart;
    const scrapes = await timed(100, () => metrics.render(store));
    const uncached = new ApiMetrics({ defaultMetrics: false, minReadIntervalMs: 0 });
    const uncachedScrapes = await timed(30, () => uncached.render(store));
    progress('run storage at scale: a sweep pass over 10,000 waiting runs, in a process of its own');
    const sweep = sweepInChild(full.url);
    return {
      ledgerRows: LEDGER_ROWS,
      runs: RUNS,
      populateSeconds,
      claimMs: p50(claims),
      unknownPageMs: p50(pages),
      unknownPageRows: rows,
      reserveFullMs: median(onFull),
      reserveEmptyMs: median(onEmpty),
      scrapeMs: p50(scrapes),
      countsReadMs,
      uncachedScrapeMs: p50(uncachedScrapes),
      sweepSeconds: sweep.seconds,
      sweepRuns: sweep.runs,
      sweepRssMiB: sweep.rssMiB,
    };
  } finally {
    await fullStore?.close();
    await emptyStore?.close();
    await full.drop();
    await empty.drop();
  }
}

/** The "Run storage at scale" part of docs/benchmarks.md. */
export function scaleMarkdown(r: ScaleResult): string[] {
  const verdict = (ok: boolean): string => (ok ? 'met' : '**missed**');
  const ms = (n: number): string => n.toFixed(2);
  return [
    '### At scale',
    '',
    `PostgreSQL holding ${r.ledgerRows.toLocaleString('en')} ledger rows and ${r.runs.toLocaleString('en')} runs`,
    `(written with \`generate_series\` in ${r.populateSeconds.toFixed(0)} s, then \`VACUUM ANALYZE\` as autovacuum would):`,
    `${QUEUED.toLocaleString('en')} runs queued, ${LIVE.toLocaleString('en')} running under live leases with one call`,
    `each in flight, ${LOST} whose worker died with a call started, ${WAITING.toLocaleString('en')} waiting (half on an`,
    'unknown call, half on an approval), the rest completed, two messages each. Medians of 200 claims,',
    '200 unknown-calls pages, 300 reservations (each beside one on an empty database), 100 scrapes',
    '(and 30 that read the counts themselves).',
    '',
    '| what | figure | target | verdict |',
    '| --- | --- | --- | --- |',
    `| claim of the next run | ${ms(r.claimMs)} ms | < 2 ms | ${verdict(r.claimMs < 2)} |`,
    `| unknown-calls page (${r.unknownPageRows} rows; ${LIVE.toLocaleString('en')} calls in flight left out) | ${ms(r.unknownPageMs)} ms | < 5 ms | ${verdict(r.unknownPageMs < 5)} |`,
    `| a reservation, full / empty database | ${ms(r.reserveFullMs)} / ${ms(r.reserveEmptyMs)} ms = ${(r.reserveFullMs / r.reserveEmptyMs).toFixed(2)}× | ≤ 1.2× | ${verdict(r.reserveFullMs / r.reserveEmptyMs <= 1.2)} |`,
    `| a \`/metrics\` scrape (interval 5 s; the read behind it, once per interval and off the scrape's path: ${r.countsReadMs.toFixed(0)} ms) | ${ms(r.scrapeMs)} ms | < 20 ms | ${verdict(r.scrapeMs < 20)} |`,
    ...(r.uncachedScrapeMs === undefined
      ? []
      : [
          `| a \`/metrics\` scrape, uncached (\`--metrics-interval-ms 0\`: the counts read at each scrape) | ${ms(r.uncachedScrapeMs)} ms | ≤ 20 ms | ${verdict(r.uncachedScrapeMs <= 20)} |`,
        ]),
    `| a sweep pass over ${r.sweepRuns.toLocaleString('en')} waiting runs | ${r.sweepSeconds.toFixed(2)} s (${((r.sweepSeconds * 1000) / Math.max(1, r.sweepRuns)).toFixed(3)} ms a run) | < 10 s | ${verdict(r.sweepSeconds < 10)} |`,
    `| memory of the process making that pass (RSS) | ${r.sweepRssMiB.toFixed(0)} MiB | < 200 MB | ${verdict(r.sweepRssMiB * 1.048576 < 200)} |`,
    '',
  ];
}
