import Database from 'better-sqlite3';
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
  type Runtime,
  type Store,
} from '../src/index.js';
import type { BenchCase, OpenCase } from './case.js';

/** Scales every case's operation count (`BENCH_SCALE=0.2` for a quick look). */
const SCALE = Number(process.env.BENCH_SCALE ?? 1);
const ops = (n: number): number => Math.max(10, Math.round(n * SCALE));

const TENANT = 'bench';

/** The side effect every case performs: nothing, keyed (the peers do the same). */
const tool = defineTool({
  name: 'bench_effect',
  description: 'does nothing, keyed',
  input: z.object({ n: z.number() }),
  effect: external(),
  execute: (args) => ({ n: args.n }),
});

/** The floor: what the server charges for autocommit single-row statements, over one connection. */
function pgFloor(id: string, label: string, statements: 'one-write' | 'two-writes' | 'read'): BenchCase {
  return {
    id,
    label,
    unit: statements === 'read' ? 'read' : 'write',
    ops: ops(2000),
    concurrency: 1,
    async open(url) {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      await client.query(
        'CREATE TABLE IF NOT EXISTS bench_floor (id text PRIMARY KEY, status text, v jsonb)',
      );
      if (statements === 'read') {
        await client.query(
          `INSERT INTO bench_floor SELECT 'r' || g, 'completed', '{"n":1}' FROM generate_series(0, $1) g`,
          [ops(2000)],
        );
      }
      return {
        async op(i) {
          if (statements === 'read') {
            await client.query({ text: 'SELECT * FROM bench_floor WHERE id = $1', values: [`r${i}`] });
            return;
          }
          await client.query({
            text: `INSERT INTO bench_floor (id, status, v) VALUES ($1, 'started', $2)`,
            values: [`w${i}`, '{"n":1}'],
          });
          if (statements === 'two-writes') {
            await client.query({
              text: `UPDATE bench_floor SET status = 'completed', v = $2 WHERE id = $1`,
              values: [`w${i}`, '{"n":2}'],
            });
          }
        },
        close: () => client.end(),
      };
    },
  };
}

async function ledgerOn(url: string): Promise<{ store: Store; ledger: Ledger }> {
  const store = await openStore(url, { migrate: true });
  return { store, ledger: new Ledger(store, { actorId: 'bench' }) };
}

const callOf = (runId: string, i: number) => ({ tenantId: TENANT, runId, toolCallId: `c${i}` });

/** A guarded call of a new key, or a replay of a completed one, sequential or 16 at once. */
function guardedCall(prefix: string, kind: 'new' | 'replay', concurrency: 1 | 16): BenchCase {
  const n = ops(kind === 'new' ? 1000 : 2000);
  return {
    id: `${prefix}.call.${kind}.${concurrency === 1 ? 'seq' : 'c16'}`,
    label: `guarded call, ${kind === 'new' ? 'new key' : 'replay of a completed key'}, ${
      concurrency === 1 ? 'sequential' : '16 concurrent'
    }`,
    unit: 'call',
    ops: n,
    concurrency,
    async open(where) {
      const { ledger } = await ledgerOn(where);
      if (kind === 'replay') {
        for (let i = 0; i < n; i += 16) {
          await executeToolCalls(
            ledger,
            Array.from({ length: Math.min(16, n - i) }, (_, j) => ({
              tool,
              args: { n: i + j },
              ...callOf('replayed', i + j),
            })),
          );
        }
      }
      const runId = kind === 'new' ? 'fresh' : 'replayed';
      return {
        op: (i) => executeToolCall(ledger, tool, { n: i }, callOf(runId, i)),
        close: () => ledger.close(),
      };
    },
  };
}

/** One guarded step of k calls through `executeToolCalls`. */
function guardedStep(prefix: string, k: number): BenchCase {
  return {
    id: `${prefix}.step.k${k}.execute`,
    label: `executeToolCalls, a step of ${k} call${k === 1 ? '' : 's'}`,
    unit: 'step',
    ops: ops(k === 16 ? 150 : 400),
    concurrency: 1,
    async open(url) {
      const { ledger } = await ledgerOn(url);
      return {
        op: (i) =>
          executeToolCalls(
            ledger,
            Array.from({ length: k }, (_, j) => ({ tool, args: { n: j }, ...callOf(`s${i}`, j) })),
          ),
        close: () => ledger.close(),
      };
    },
  };
}

/** A runtime with one scripted agent: `steps` model steps of `k` calls each, then an answer. */
async function runtimeOn(url: string, steps: number, k: number): Promise<{ runtime: Runtime; store: Store }> {
  const store = await openStore(url, { migrate: true });
  // Each call of the run is another effect (its own arguments), so every one is looked up as a
  // possible repeat and none is one: the cost of the guard, without approvals.
  const stepOf = (s: number) => ({
    toolCalls: Array.from({ length: k }, (_, n) => ({ toolName: tool.name, input: { n: s * k + n } })),
  });
  const agent = defineAgent({
    name: 'bench',
    instructions: 'bench',
    model: scriptedModel([...Array.from({ length: steps }, (_, s) => stepOf(s)), { text: 'done' }]),
    tools: [tool],
    maxSteps: steps + 1,
  });
  const runtime = await openRuntime({ store, agents: [agent], owner: 'bench' });
  return { runtime, store };
}

/** One run, started and driven here (`runtime.run`: created already claimed). */
async function driveOne(runtime: Runtime): Promise<void> {
  const done = await runtime.run({ tenantId: TENANT, agent: 'bench', input: 'go' });
  if (done.status !== 'completed') throw new Error(`bench run ended ${done.status}`);
}

/** How many tool steps a run-loop case's run takes; `*.run.empty` is the same run with none. */
export const LOOP_STEPS = 5;

/**
 * Run-loop steps of k calls: a run of LOOP_STEPS such steps is one operation, reported per step (the
 * run's own start (claimed as it is created) and answer included; the targets take them out with
 * `*.run.empty`).
 */
function loopStep(prefix: string, k: number): BenchCase {
  const steps = LOOP_STEPS;
  return {
    id: `${prefix}.step.k${k}.loop`,
    label: `run loop, a step of ${k} call${k === 1 ? '' : 's'} (runs of ${steps} steps)`,
    unit: 'step',
    ops: ops(k === 16 ? 30 : 80),
    concurrency: 1,
    unitsPerOp: steps,
    async open(url) {
      const { runtime, store } = await runtimeOn(url, steps, k);
      return { op: () => driveOne(runtime), close: () => closeAll(runtime, store) };
    },
  };
}

/** A whole agent run of `steps` model steps of one tool call each, then an answer (none: it answers at once). */
function runCase(id: string, label: string, steps: number): BenchCase {
  return {
    id,
    label,
    unit: 'run',
    ops: ops(150),
    concurrency: 1,
    async open(url) {
      const { runtime, store } = await runtimeOn(url, steps, 1);
      return { op: () => driveOne(runtime), close: () => closeAll(runtime, store) };
    },
  };
}

const wholeRun = (prefix: string): BenchCase =>
  runCase(`${prefix}.run.calls-3`, 'a whole agent run of 3 tool calls (scripted model)', 3);

/** What a run costs besides its steps (its start, claimed as it is created, and its answer). */
const emptyRun = (prefix: string): BenchCase =>
  runCase(`${prefix}.run.empty`, 'a run whose model answers at once (no tool step)', 0);

async function closeAll(runtime: Runtime, store: Store): Promise<void> {
  try {
    await runtime.close();
  } finally {
    await store.close();
  }
}

/** Every PostgreSQL case of oncely and its floors. */
export function postgresCases(): BenchCase[] {
  return [
    pgFloor('pg.floor.one-write', 'floor: one autocommit single-row insert', 'one-write'),
    pgFloor('pg.floor.two-writes', 'floor: two autocommit single-row writes (insert, update)', 'two-writes'),
    pgFloor('pg.floor.read', 'floor: one single-row read by primary key', 'read'),
    guardedCall('pg', 'new', 1),
    guardedCall('pg', 'new', 16),
    guardedCall('pg', 'replay', 1),
    guardedCall('pg', 'replay', 16),
    ...[1, 4, 16].flatMap((k) => [guardedStep('pg', k), loopStep('pg', k)]),
    wholeRun('pg'),
    emptyRun('pg'),
  ];
}

/** SQLite's floor: two autocommit single-row writes on a file with the store's own settings. */
function sqliteFloor(): BenchCase {
  return {
    id: 'sqlite.floor.two-writes',
    label: 'floor: two autocommit single-row writes (better-sqlite3, WAL, synchronous=FULL)',
    unit: 'write',
    ops: ops(2000),
    concurrency: 1,
    open(path) {
      const db = new Database(path);
      db.pragma('journal_mode = WAL');
      db.pragma('synchronous = FULL');
      db.exec('CREATE TABLE IF NOT EXISTS bench_floor (id TEXT PRIMARY KEY, status TEXT, v TEXT)');
      const insert = db.prepare(`INSERT INTO bench_floor (id, status, v) VALUES (?, 'started', '{"n":1}')`);
      const update = db.prepare(`UPDATE bench_floor SET status = 'completed', v = '{"n":2}' WHERE id = ?`);
      const open: OpenCase = {
        op(i) {
          insert.run(`w${i}`);
          update.run(`w${i}`);
          return Promise.resolve();
        },
        close() {
          db.close();
          return Promise.resolve();
        },
      };
      return Promise.resolve(open);
    },
  };
}

/** The SQLite cases: `open` gets a file path; the oncely cases open it as `sqlite:PATH`. */
export function sqliteCases(): BenchCase[] {
  const onFile = (c: BenchCase): BenchCase => ({ ...c, open: (path) => c.open(`sqlite:${path}`) });
  return [
    sqliteFloor(),
    onFile(guardedCall('sqlite', 'new', 1)),
    onFile(guardedCall('sqlite', 'replay', 1)),
    onFile(guardedStep('sqlite', 16)),
    onFile(loopStep('sqlite', 4)),
    onFile(wholeRun('sqlite')),
  ];
}
