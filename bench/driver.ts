/**
 * PostgreSQL drivers (issue 36): the guarded call's two statements (the reservation, RESERVE_ONE, and
 * the outcome, TRANSITION, with the parameters the store builds) sent through `pg` as the store sends
 * them today (a pool on the hot statements' settings, named prepared statements) and through
 * postgres.js (`sql.unsafe(text, params, { prepare: true })`), side by side in one process, in rounds
 * whose order is shuffled, each case on a fresh migrated database. Beside them: each driver's floor
 * (two autocommit single-row writes, as `pg.floor.two-writes`), `pg` with the wide `RETURNING *`
 * narrowed to the columns the statements' own events need (how much of the decoding is the row's
 * width), and the whole guarded call through oncely (what share of a call the statements are).
 *
 * Part of `npm run bench` (section "PostgreSQL drivers" of docs/benchmarks.md); `npm run bench:driver`
 * runs it alone and prints the table. BENCH_ROUNDS (default 5), BENCH_SCALE (calls per round,
 * default 1 = 2000) and, alone, BENCH_ONLY (a regular expression of the case ids to run) apply.
 */
import { existsSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { inspect, isDeepStrictEqual } from 'node:util';
import pg from 'pg';
import postgres from 'postgres';
import { z } from 'zod';
import { defineTool, executeToolCall, external, Ledger, openStore, type Store } from '../src/index.js';
import { RESERVE_ONE, TRANSITION, reserveOneParams, transitionParams } from '../src/store/ledger-sql.js';
import type { ReserveRequest, TransitionRequest } from '../src/store/ledger-store.js';
import { toRecord, type ExecutionRow } from '../src/store/rows.js';
import { DEFAULT_POSTGRES_TIMEOUTS, HOT_SETTINGS } from '../src/store/postgres/postgres-store.js';
import { prepared } from '../src/store/postgres/prepared.js';
import { median, quantile, shuffled } from './measure.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const SCALE = Number(process.env.BENCH_SCALE ?? 1);
const SEED = Number(process.env.BENCH_SEED ?? Date.now() % 100_000);
/** Sequential calls per case and round. */
export const DRIVER_CALLS = Math.max(10, Math.round(2000 * SCALE));
/** postgres.js saves at least this share of the client CPU of a call's statements, or `pg` stays. */
export const SWITCH_AT = 0.2;

const TENANT = 'bench';
const ACTOR = { kind: 'runtime', id: 'bench' } as const;
/** PostgreSQL's json and jsonb: both drivers hand them over as text, as the store reads them. */
const JSON_OIDS = [114, 3802];

/** One case measured: per call, the medians over the rounds. */
export interface DriverCase {
  readonly id: string;
  readonly label: string;
  readonly p50ms: number;
  readonly clientCpuMs: number;
  /** The client CPU of each round, in the order of the rounds (its spread). */
  readonly clientCpuMsByRound: readonly number[];
  /** CPU of the server processes that ran the case's statements (its database's backends). */
  readonly serverCpuMs?: number;
}

/** What the drivers comparison measured, kept in docs/benchmarks.json. */
export interface DriverReport {
  readonly rounds: number;
  readonly calls: number;
  readonly versions: { readonly pg: string; readonly postgresjs: string };
  readonly cases: readonly DriverCase[];
}

/** One case on its database: `call(i)` is one call (or one floor unit) of key number `i`. */
interface Open {
  call(i: number): Promise<void>;
  close(): Promise<void>;
}

interface Variant {
  readonly id: string;
  readonly label: string;
  open(url: string): Promise<Open>;
}

/** Where a variant's rows are read: a SQL text runner returning the rows, as each driver gives them. */
type Runner = (name: string, text: string, params: unknown[]) => Promise<readonly unknown[]>;

/** The columns the statements' own events read from the row they wrote, and the status and version. */
const NARROW = ['tenant_id', 'idempotency_key', 'status', 'version', 'attempt'];

function replaceOnce(text: string, from: string, to: string): string {
  const at = text.indexOf(from);
  if (at < 0 || text.indexOf(from, at + 1) >= 0) throw new Error(`expected one "${from}" in the statement`);
  return text.slice(0, at) + to + text.slice(at + from.length);
}

/** The two statements with their rows narrowed to NARROW (informational: the cost of the width). */
const NARROW_RESERVE = replaceOnce(
  replaceOnce(RESERVE_ONE.postgres, 'RETURNING t.*', `RETURNING ${NARROW.map((c) => `t.${c}`).join(', ')}`),
  'SELECT false AS mine, t.* FROM',
  `SELECT false AS mine, ${NARROW.map((c) => `t.${c}`).join(', ')} FROM`,
);
const NARROW_TRANSITION = replaceOnce(TRANSITION.postgres, 'RETURNING *', `RETURNING ${NARROW.join(', ')}`);

function reservation(i: number): ReserveRequest {
  return {
    tenantId: TENANT,
    idempotencyKey: `key-${i}`,
    runId: 'run',
    toolCallId: `c${i}`,
    toolName: 'bench_effect',
    effect: 'external',
    args: { n: i },
    argsDigest: `digest-${i}`,
    compensationOf: null,
    attemptTimeoutMs: 60_000,
    repeatDigest: `repeat-${i}`,
    conversationId: null,
  };
}

function outcome(i: number): TransitionRequest {
  return {
    tenantId: TENANT,
    idempotencyKey: `key-${i}`,
    via: 'outcome',
    to: 'completed',
    expect: { status: 'started', version: 1 },
    actor: ACTOR,
    reason: null,
    result: { n: i },
    recordIgnored: true,
  };
}

/** The guarded call's statements through `run`: each must write its row, or the case measures nothing. */
function guardedStatements(run: Runner, narrow: boolean): (i: number) => Promise<void> {
  const [reserveName, transitionName] = narrow
    ? ['bench_reserve_narrow', 'bench_transition_narrow']
    : ['oncely_reserve_one', 'oncely_transition'];
  const reserveText = narrow ? NARROW_RESERVE : RESERVE_ONE.postgres;
  const transitionText = narrow ? NARROW_TRANSITION : TRANSITION.postgres;
  return async (i) => {
    const reserved = await run(reserveName, reserveText, reserveOneParams(reservation(i), ACTOR));
    if ((reserved[0] as { mine?: boolean } | undefined)?.mine !== true)
      throw new Error(`key ${i} not reserved`);
    const moved = await run(transitionName, transitionText, transitionParams(outcome(i)));
    if ((moved[0] as { status?: string } | undefined)?.status !== 'completed') {
      throw new Error(`key ${i}: the outcome did not apply`);
    }
  };
}

/** The store's type parsers (postgres-store.ts): json and jsonb as text, the rest as pg parses them. */
function getTypeParser(oid: number, format?: 'text' | 'binary'): (value: string) => unknown {
  if (JSON_OIDS.includes(oid)) return (value: string) => value;
  return format === 'binary'
    ? (pg.types.getTypeParser(oid, 'binary') as (value: string) => unknown)
    : (pg.types.getTypeParser(oid, 'text') as (value: string) => unknown);
}

/** `pg` as the store's hot pool is made (postgres-store.ts), one connection: this process's calls are sequential. */
function pgHotPool(url: string): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max: 1,
    types: { getTypeParser },
    statement_timeout: DEFAULT_POSTGRES_TIMEOUTS.statementMs,
    lock_timeout: DEFAULT_POSTGRES_TIMEOUTS.lockMs,
    idle_in_transaction_session_timeout: DEFAULT_POSTGRES_TIMEOUTS.idleInTransactionMs,
    options: Object.entries(HOT_SETTINGS)
      .map(([name, value]) => `-c ${name}=${value}`)
      .join(' '),
  });
  // As the store's: an idle client's error (the server went away) is the next query's to report.
  pool.on('error', () => undefined);
  return pool;
}

/** postgres.js with the same settings (`hot`), timeouts and json handling, one connection. */
function postgresJs(url: string, hot: boolean): postgres.Sql {
  return postgres(url, {
    max: 1,
    onnotice: () => undefined,
    types: {
      jsonAsText: {
        to: 3802,
        from: JSON_OIDS,
        serialize: (value: string) => value,
        parse: (value: string) => value,
      },
    },
    connection: hot
      ? {
          ...HOT_SETTINGS,
          statement_timeout: DEFAULT_POSTGRES_TIMEOUTS.statementMs,
          lock_timeout: DEFAULT_POSTGRES_TIMEOUTS.lockMs,
          idle_in_transaction_session_timeout: DEFAULT_POSTGRES_TIMEOUTS.idleInTransactionMs,
        }
      : {},
  });
}

const FLOOR_TABLE = 'CREATE TABLE IF NOT EXISTS bench_floor (id text PRIMARY KEY, status text, v jsonb)';
const FLOOR_INSERT = `INSERT INTO bench_floor (id, status, v) VALUES ($1, 'started', $2)`;
const FLOOR_UPDATE = `UPDATE bench_floor SET status = 'completed', v = $2 WHERE id = $1`;

const effect = defineTool({
  name: 'bench_effect',
  description: 'does nothing, keyed',
  input: z.object({ n: z.number() }),
  effect: external(),
  execute: (args) => ({ n: args.n }),
});

function variants(): Variant[] {
  return [
    {
      id: 'pg.call',
      label: 'pg: the two statements, named prepared (as the store sends them)',
      open(url) {
        const pool = pgHotPool(url);
        const call = guardedStatements(
          async (name, text, values) =>
            (await pool.query<Record<string, unknown>>({ ...prepared(name, text), values })).rows,
          false,
        );
        return Promise.resolve({ call, close: () => pool.end() });
      },
    },
    {
      id: 'pg.call.narrow',
      label: 'pg: the same, rows narrowed to 5 columns (informational)',
      open(url) {
        const pool = pgHotPool(url);
        const call = guardedStatements(
          async (name, text, values) =>
            (await pool.query<Record<string, unknown>>({ ...prepared(name, text), values })).rows,
          true,
        );
        return Promise.resolve({ call, close: () => pool.end() });
      },
    },
    {
      id: 'postgresjs.call',
      label: 'postgres.js: the two statements, prepared',
      open(url) {
        const sql = postgresJs(url, true);
        const call = guardedStatements(
          async (_name, text, values) =>
            await sql.unsafe<Record<string, unknown>[]>(text, values as postgres.ParameterOrJSON<never>[], {
              prepare: true,
            }),
          false,
        );
        return Promise.resolve({ call, close: () => sql.end() });
      },
    },
    {
      id: 'pg.floor',
      label: 'pg: floor, two autocommit single-row writes, unnamed (as pg.floor.two-writes)',
      async open(url) {
        const client = new pg.Client({ connectionString: url });
        client.on('error', () => undefined);
        await client.connect();
        await client.query(FLOOR_TABLE);
        return {
          async call(i) {
            await client.query({ text: FLOOR_INSERT, values: [`w${i}`, '{"n":1}'] });
            await client.query({ text: FLOOR_UPDATE, values: [`w${i}`, '{"n":2}'] });
          },
          close: () => client.end(),
        };
      },
    },
    {
      id: 'pg.floor.named',
      label: 'pg: floor, the same two writes, named prepared',
      async open(url) {
        const client = new pg.Client({ connectionString: url });
        client.on('error', () => undefined);
        await client.connect();
        await client.query(FLOOR_TABLE);
        return {
          async call(i) {
            await client.query({
              name: 'bench_floor_insert',
              text: FLOOR_INSERT,
              values: [`w${i}`, '{"n":1}'],
            });
            await client.query({
              name: 'bench_floor_update',
              text: FLOOR_UPDATE,
              values: [`w${i}`, '{"n":2}'],
            });
          },
          close: () => client.end(),
        };
      },
    },
    {
      // Unprepared, postgres.js asks the server for the parameters' types before each statement
      // (a round trip more): its floor is its default, prepared.
      id: 'postgresjs.floor',
      label: 'postgres.js: floor, the same two writes, prepared (its default)',
      async open(url) {
        const sql = postgresJs(url, false);
        await sql.unsafe(FLOOR_TABLE);
        return {
          async call(i) {
            await sql.unsafe(FLOOR_INSERT, [`w${i}`, '{"n":1}'], { prepare: true });
            await sql.unsafe(FLOOR_UPDATE, [`w${i}`, '{"n":2}'], { prepare: true });
          },
          close: () => sql.end(),
        };
      },
    },
    {
      id: 'oncely.call',
      label: 'oncely on pg: the whole guarded call (executeToolCall, as pg.call.new.seq)',
      async open(url) {
        const store: Store = await openStore(url, { migrate: true });
        const ledger = new Ledger(store, { actorId: 'bench' });
        return {
          call: (i) =>
            executeToolCall(
              ledger,
              effect,
              { n: i },
              { tenantId: TENANT, runId: 'run', toolCallId: `c${i}` },
            ).then(() => undefined),
          close: () => ledger.close(),
        };
      },
    },
  ];
}

/** CPU time (ms, user and system) of one process so far, from its `/proc` stat line (0: gone or unreadable). */
function processCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime, in USER_HZ (100 a second on every mainstream kernel).
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
  } catch {
    return 0;
  }
}

/**
 * The CPU so far of each server process connected to the case's database but `watch`'s own: the
 * backends that run the case's statements (the server's shared processes and other databases'
 * backends are left out, so other clients of the same server do not count). Undefined where the
 * server's processes cannot be read (no `/proc`, or the server on another machine).
 */
async function backendsCpuMs(watch: pg.Client): Promise<Map<number, number> | undefined> {
  const { rows } = await watch.query<{ pid: number }>(
    'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
  );
  const own = await watch.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  if (!existsSync(`/proc/${own.rows[0]!.pid}/stat`)) return undefined;
  return new Map(rows.map((r) => [r.pid, processCpuMs(r.pid)]));
}

interface Sample {
  readonly p50ms: number;
  readonly clientCpuMs: number;
  readonly serverCpuMs?: number;
}

async function sampleOf(variant: Variant, url: string): Promise<Sample> {
  const watch = new pg.Client({ connectionString: url });
  await watch.connect();
  const open = await variant.open(url);
  try {
    const latencies: number[] = [];
    // A call before the count, so every connection the case uses is open (and seen) when it starts.
    await open.call(DRIVER_CALLS);
    const serverBefore = await backendsCpuMs(watch);
    const cpuBefore = process.cpuUsage();
    for (let i = 0; i < DRIVER_CALLS; i++) {
      const t = performance.now();
      await open.call(i);
      latencies.push(performance.now() - t);
    }
    const cpu = process.cpuUsage(cpuBefore);
    const serverAfter = await backendsCpuMs(watch);
    latencies.sort((a, b) => a - b);
    let serverMs = 0;
    for (const [pid, ms] of serverAfter ?? []) serverMs += ms - (serverBefore?.get(pid) ?? 0);
    return {
      p50ms: quantile(latencies, 0.5),
      clientCpuMs: (cpu.user + cpu.system) / 1000 / DRIVER_CALLS,
      ...(serverBefore === undefined || serverAfter === undefined
        ? {}
        : { serverCpuMs: serverMs / DRIVER_CALLS }),
    };
  } finally {
    await open.close();
    await watch.end();
  }
}

function installedVersion(name: string): string {
  const path = new URL(`../node_modules/${name}/package.json`, import.meta.url);
  return (JSON.parse(readFileSync(path, 'utf8')) as { version: string }).version;
}

/**
 * The rows of postgres.js are pg's as the store reads them (json as text, times as dates, each column
 * of the same type), so the comparison is of two drivers handing the store the same rows: a call's
 * record read through both, compared as rows and as the store's records.
 */
async function sameRows(url: string): Promise<void> {
  const pool = pgHotPool(url);
  const sql = postgresJs(url, true);
  try {
    await guardedStatements(
      async (name, text, values) =>
        (await pool.query<Record<string, unknown>>({ ...prepared(name, text), values })).rows,
      false,
    )(0);
    const text = 'SELECT * FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = $2';
    const viaPg = (await pool.query<ExecutionRow>(text, [TENANT, 'key-0'])).rows;
    const viaJs = [...(await sql.unsafe<ExecutionRow[]>(text, [TENANT, 'key-0'], { prepare: true }))];
    if (viaPg.length !== 1 || !isDeepStrictEqual({ ...viaPg[0] }, { ...viaJs[0] })) {
      throw new Error(`pg and postgres.js read the record differently: ${inspect([viaPg, viaJs])}`);
    }
    if (!isDeepStrictEqual(viaPg.map(toRecord), viaJs.map(toRecord))) {
      throw new Error('pg and postgres.js rows make different records');
    }
  } finally {
    await Promise.all([pool.end(), sql.end()]);
  }
}

/** Every variant once per round, in a shuffled order, each on a fresh database migrated by oncely. */
export async function measureDrivers(
  fresh: () => Promise<{ url: string; drop(): Promise<void> }>,
  progress: (message: string) => void,
): Promise<DriverReport> {
  // `BENCH_ONLY=<regular expression>`: only the cases whose ids match (an A/B; nothing is written).
  const only = process.env.BENCH_ONLY ? new RegExp(process.env.BENCH_ONLY) : undefined;
  const all = variants().filter((v) => only === undefined || only.test(v.id));
  const samples = new Map<string, Sample[]>(all.map((v) => [v.id, []]));
  const check = await fresh();
  try {
    await (await openStore(check.url, { migrate: true })).close();
    await sameRows(check.url);
  } finally {
    await check.drop();
  }
  for (let round = 1; round <= ROUNDS; round++) {
    for (const variant of shuffled(all, SEED + round)) {
      progress(`drivers: round ${round}/${ROUNDS}: ${variant.id} (${DRIVER_CALLS} calls)`);
      const db = await fresh();
      try {
        const store = await openStore(db.url, { migrate: true });
        await store.close();
        samples.get(variant.id)!.push(await sampleOf(variant, db.url));
      } finally {
        await db.drop();
      }
    }
  }
  const medianOf = (values: readonly (number | undefined)[]): number | undefined =>
    values.some((v) => v === undefined) ? undefined : median(values as number[]);
  return {
    rounds: ROUNDS,
    calls: DRIVER_CALLS,
    versions: { pg: installedVersion('pg'), postgresjs: installedVersion('postgres') },
    cases: all.map((v) => {
      const mine = samples.get(v.id)!;
      const serverCpuMs = medianOf(mine.map((s) => s.serverCpuMs));
      return {
        id: v.id,
        label: v.label,
        p50ms: median(mine.map((s) => s.p50ms)),
        clientCpuMs: median(mine.map((s) => s.clientCpuMs)),
        clientCpuMsByRound: mine.map((s) => s.clientCpuMs),
        ...(serverCpuMs === undefined ? {} : { serverCpuMs }),
      };
    }),
  };
}

/**
 * postgres.js's client CPU for the call's statements over pg's (`ratio`, and round by round), and the
 * client CPU it would save as a share of a whole guarded call (`callSaving`: what a call costs is the
 * statements and oncely's own work around them): switching pays from SWITCH_AT of a call.
 */
export function driverDecision(report: DriverReport): {
  ratio: number;
  /** The same ratio round by round (the two cases of one round ran in the same round, in either order). */
  byRound: number[];
  callSaving: number;
  switches: boolean;
} {
  const of = (id: string): DriverCase | undefined => report.cases.find((c) => c.id === id);
  const [pgCall, jsCall, whole] = [of('pg.call'), of('postgresjs.call'), of('oncely.call')];
  const [pgMs, jsMs] = [pgCall?.clientCpuMs ?? Number.NaN, jsCall?.clientCpuMs ?? Number.NaN];
  const byRound = (jsCall?.clientCpuMsByRound ?? []).map(
    (ms, i) => ms / (pgCall?.clientCpuMsByRound[i] ?? Number.NaN),
  );
  const callSaving = (pgMs - jsMs) / (whole?.clientCpuMs ?? Number.NaN);
  return { ratio: jsMs / pgMs, byRound, callSaving, switches: callSaving >= SWITCH_AT };
}

/** The lowest and highest of the rounds' ratios, as "0.71-0.86". */
const spread = (ratios: readonly number[]): string =>
  `${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)}`;

const fixed = (n: number | undefined, digits = 3): string => (n === undefined ? '–' : n.toFixed(digits));
const percent = (n: number): string => `${Math.round(n * 100)}%`;

/** The "PostgreSQL drivers" section of docs/benchmarks.md. */
export function driverMarkdown(report: DriverReport): string[] {
  const byId = new Map(report.cases.map((c) => [c.id, c]));
  const cpu = (id: string): number => byId.get(id)?.clientCpuMs ?? Number.NaN;
  const { ratio, byRound, callSaving, switches } = driverDecision(report);
  const statementsSaving = cpu('pg.call') - cpu('postgresjs.call');
  const narrowSaving = 1 - cpu('pg.call.narrow') / cpu('pg.call');
  const lines = [
    '## PostgreSQL drivers',
    '',
    `The guarded call's two statements (the reservation and the outcome, with the parameters the store`,
    `builds) sent through \`pg\` ${report.versions.pg} as the store sends them and through postgres.js`,
    `${report.versions.postgresjs} (\`sql.unsafe(text, params, { prepare: true })\`), each on one connection`,
    `with the store's settings for its hot statements, ${report.calls} sequential calls per case and round,`,
    `${report.rounds} rounds in shuffled orders, each case on a fresh migrated database (\`bench/driver.ts\`,`,
    "`npm run bench:driver` alone). Per call, medians over the rounds: client CPU is this process's",
    "(user and system); server CPU that of the server processes connected to the case's database (the",
    'backends that ran its statements; the other clients of the server and its shared processes left out).',
    '',
    '| case | p50, ms | client CPU, ms | server CPU, ms |',
    '| --- | --- | --- | --- |',
    ...report.cases.map(
      (c) =>
        `| ${c.label} (\`${c.id}\`) | ${fixed(c.p50ms)} | ${fixed(c.clientCpuMs)} | ${fixed(c.serverCpuMs)} |`,
    ),
    '',
    `postgres.js uses ${ratio.toFixed(2)}× pg's client CPU for the call's statements (rounds: ${spread(byRound)}):`,
    `${fixed(statementsSaving)} ms a call, ${percent(callSaving)} of a whole guarded call's client CPU. On the floor`,
    `postgres.js uses ${(cpu('postgresjs.floor') / cpu('pg.floor.named')).toFixed(2)}× pg's client CPU with named statements,`,
    `${(cpu('postgresjs.floor') / cpu('pg.floor')).toFixed(2)}× with unnamed ones. Narrowing the rows to five columns saves`,
    `${percent(narrowSaving)} of pg's client CPU for the statements: that share of the decoding is the row's width.`,
    '',
  ];
  if (switches) {
    lines.push(
      `**Decision: switching pays** (at least ${percent(SWITCH_AT)} of a call's client CPU). Switching takes:`,
      'the wake-ups (LISTEN/NOTIFY on a connection of their own, `src/store/postgres/wakeups.ts`, to',
      "postgres.js's `sql.listen`); the two pools (the hot statements' and the others', their sizes,",
      'connect and server-side timeouts and idle-error handling); the outage classification and stale-plan',
      'retries (`src/store/postgres/pg-errors.ts`, `prepared.ts`: postgres.js names its errors and its',
      'connection losses differently); and the group commit (`src/store/postgres/group-commit.ts`), whose',
      'transactions would go through `sql.begin`.',
    );
  } else {
    lines.push(
      `**Decision: the store keeps \`pg\`**: postgres.js saves less than ${percent(SWITCH_AT)} of a call's client CPU`,
      '(the threshold for a switch that would touch the wake-ups, both pools, the outage and retry handling',
      'and the group commit).',
    );
  }
  lines.push('');
  return lines;
}

/** `npm run bench:driver`: the comparison alone, on DATABASE_URL (or an embedded PostgreSQL), printed. */
async function main(): Promise<void> {
  const { startOwnPostgres } = await import('../test/support/own-postgres.js');
  const progress = (message: string): void => void process.stderr.write(`[bench] ${message}\n`);
  let own: Awaited<ReturnType<typeof startOwnPostgres>> | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (adminUrl === undefined || adminUrl === '') {
    progress('no DATABASE_URL: starting an embedded PostgreSQL (fsync=off, figures not durable)');
    own = await startOwnPostgres('bench');
    adminUrl = own.url;
  }
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  let n = 0;
  try {
    const report = await measureDrivers(async () => {
      const name = `oncely_driver_${process.pid}_${(n += 1)}`;
      const url = new URL(adminUrl);
      url.pathname = `/${name}`;
      await admin.query(`CREATE DATABASE ${name}`);
      return {
        url: url.toString(),
        drop: async () => void (await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)),
      };
    }, progress);
    console.table(
      report.cases.map((c) => ({
        case: c.id,
        p50ms: fixed(c.p50ms),
        cpuClient: fixed(c.clientCpuMs),
        cpuClientRounds: c.clientCpuMsByRound.map((ms) => fixed(ms)).join(' '),
        cpuServer: fixed(c.serverCpuMs),
      })),
    );
    const { ratio, byRound, callSaving, switches } = driverDecision(report);
    console.log(
      `postgres.js / pg, client CPU of the call's statements: ${ratio.toFixed(2)} (rounds ${spread(byRound)}); ` +
        `saves ${percent(callSaving)} of a guarded call's: ` +
        (switches ? 'switching pays' : `below ${percent(SWITCH_AT)}, keep pg`),
    );
  } finally {
    await admin.end();
    await own?.destroy();
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
