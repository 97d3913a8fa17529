import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  Ledger,
  ToolNotAttemptedError,
  argsDigest,
  defineAgent,
  defineTool,
  executeToolCalls,
  external,
  openRuntime,
  openStore,
  scriptedModel,
  type Store,
} from '../../src/index.js';
import type { ReserveRequest } from '../../src/store/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';

/*
 * The counts behind /metrics (calls by tool and status, runs by status) are kept by the schema's
 * triggers as the writes happen (PostgreSQL 0017, SQLite 0015). After a mixed workload of every
 * write path — guarded calls, run steps (grouped on PostgreSQL), reservations and outcomes alone and
 * in batches, re-opens, multi-statement transactions, runs created, claimed, cancelled — from several
 * stores writing at once, they must equal a count of the rows. And a database migrated with rows in
 * it starts from their count.
 */

type Dialect = 'postgres' | 'sqlite';

interface Db {
  readonly url: string;
  /** Rows of a query straight on the database, around the store. */
  query(sql: string): Promise<Record<string, unknown>[]>;
  drop(): Promise<void>;
}

async function database(dialect: Dialect): Promise<Db> {
  if (dialect === 'postgres') {
    const db = await createTestDatabase('counts');
    return {
      url: db.url,
      async query(sql) {
        const client = new pg.Client({ connectionString: db.url });
        await client.connect();
        try {
          return (await client.query<Record<string, unknown>>(sql)).rows;
        } finally {
          await client.end();
        }
      },
      drop: () => db.drop(),
    };
  }
  const file = tempSqlitePath('counts');
  return {
    url: `sqlite:${file.path}`,
    query(sql) {
      const db = new Database(file.path, { timeout: 15_000 });
      try {
        const statement = db.prepare(sql);
        return Promise.resolve(
          statement.reader ? (statement.all() as Record<string, unknown>[]) : (statement.run(), []),
        );
      } finally {
        db.close();
      }
    },
    drop: () => Promise.resolve(file.cleanup()),
  };
}

const sorted = (rows: { key: string; count: number }[]) =>
  [...rows].filter((r) => r.count !== 0).sort((a, b) => a.key.localeCompare(b.key));

/** The counts the store reports, and the counts of the rows, side by side. */
async function countsAndRows(store: Store, db: Db) {
  const stats = await store.monitor.stats({ marginMs: 0 });
  const calls = await db.query(
    'SELECT tool_name, status, COUNT(*) AS n FROM tool_executions GROUP BY tool_name, status',
  );
  const runs = await db.query('SELECT status, COUNT(*) AS n FROM runs GROUP BY status');
  return {
    kept: {
      calls: sorted(stats.calls.map((c) => ({ key: `${c.toolName}/${c.status}`, count: c.count }))),
      runs: sorted(stats.runs.map((r) => ({ key: r.status, count: r.count }))),
    },
    counted: {
      calls: sorted(
        calls.map((r) => ({ key: `${String(r.tool_name)}/${String(r.status)}`, count: Number(r.n) })),
      ),
      runs: sorted(runs.map((r) => ({ key: String(r.status), count: Number(r.n) }))),
    },
  };
}

const credit = defineTool({
  name: 'issue_credit',
  description: 'credits an account',
  input: z.object({ n: z.number() }),
  effect: external(),
  execute: (args) => ({ receipt: `r${args.n}` }),
});
const refused = defineTool({
  name: 'send_email',
  description: 'refuses before sending anything',
  input: z.object({ n: z.number() }),
  effect: external(),
  execute: () => {
    throw new ToolNotAttemptedError('the mail server refused the token');
  },
});

function reservation(runId: string, callId: string, toolName: string): ReserveRequest {
  const args = { n: callId };
  return {
    tenantId: 'acme',
    idempotencyKey: `${runId}:${callId}`,
    runId,
    toolCallId: callId,
    toolName,
    effect: 'external',
    args,
    argsDigest: argsDigest(args),
    compensationOf: null,
    attemptTimeoutMs: 30_000,
  };
}

const RUNTIME = { kind: 'runtime', id: 'counts' } as const;

/** One writer's share of the mixed workload, on its own store. */
async function writer(store: Store, w: number, rounds: number): Promise<void> {
  const ledger = new Ledger(store, { actorId: `writer-${w}` });
  const agent = defineAgent({
    name: 'counter',
    instructions: 'count',
    model: scriptedModel([
      {
        toolCalls: [
          { toolName: 'issue_credit', input: { n: 1 } },
          { toolName: 'send_email', input: { n: 2 } },
        ],
      },
      { text: 'done' },
    ]),
    tools: [credit, refused],
    maxSteps: 3,
  });
  const runtime = await openRuntime({ store, agents: [agent], owner: `counts-${w}` });
  try {
    for (let i = 0; i < rounds; i++) {
      const tag = `w${w}_${i}`;
      // Guarded calls: one completes, one is refused (failed), then the refused one runs again
      // (a re-open) and is refused again.
      await executeToolCalls(ledger, [
        { tool: credit, args: { n: i }, tenantId: 'acme', runId: `g_${tag}`, toolCallId: 'c1' },
        { tool: refused, args: { n: i }, tenantId: 'acme', runId: `g_${tag}`, toolCallId: 'c2' },
      ]);
      await executeToolCalls(ledger, [
        { tool: refused, args: { n: i }, tenantId: 'acme', runId: `g_${tag}`, toolCallId: 'c2' },
      ]);
      // A run driven through its steps (a step's reservations and outcomes, each one write).
      await runtime.run({ tenantId: 'acme', agent: 'counter', input: 'go', runId: `run_${tag}` });
      // Reservations in a batch, outcomes in one write and in a transaction of two statements
      // (in an order that differs between writers), one left unknown.
      const reserved = await store.ledger.reserve(
        ['a', 'b', 'c', 'd'].map((c) => reservation(`b_${tag}`, c, c === 'd' ? 'lookup' : 'issue_credit')),
        RUNTIME,
      );
      const [a, b, c, d] = reserved.map((r) => r.record);
      const move = (r: typeof a, to: 'completed' | 'failed' | 'indeterminate') => ({
        tenantId: 'acme',
        idempotencyKey: r!.idempotencyKey,
        via: 'outcome' as const,
        to,
        expect: { status: r!.status, version: r!.version },
        actor: RUNTIME,
        reason: to,
        recordIgnored: false,
        ...(to === 'completed' ? { result: { ok: true } } : { error: { code: 'X', message: to } }),
      });
      await store.ledger.transitions([move(a, 'completed'), move(b, 'indeterminate')]);
      const pair = w % 2 === 0 ? [c, d] : [d, c];
      await store.transaction(async (tx) => {
        await tx.ledger.transition(move(pair[0], 'failed'));
        await tx.ledger.transition(move(pair[1], 'completed'));
      });
      // A run queued and cancelled.
      await store.runs.create({
        tenantId: 'acme',
        runId: `q_${tag}`,
        agent: 'counter',
        input: 'x',
        checkpoint: { messages: [], step: 0, pending: null },
      });
      if (i % 2 === 0) await store.runs.cancel('acme', `q_${tag}`, 'not needed', 'ops');
    }
  } finally {
    await runtime.close();
  }
}

describe.each(['postgres', 'sqlite'] as const)('the counts behind /metrics on %s', (dialect) => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (let job = cleanups.pop(); job !== undefined; job = cleanups.pop()) await job();
  });

  it('equal a count of the rows after a mixed workload of concurrent writers', async () => {
    const db = await database(dialect);
    cleanups.push(() => db.drop());
    const stores: Store[] = [];
    for (let i = 0; i < (dialect === 'postgres' ? 4 : 2); i++) {
      const store = await openStore(db.url, { migrate: true });
      cleanups.push(() => store.close());
      stores.push(store);
    }
    // Two writers on each store, all at once.
    await Promise.all(stores.flatMap((store, s) => [0, 1].map((k) => writer(store, s * 2 + k, 6))));
    const { kept, counted } = await countsAndRows(stores[0]!, db);
    expect(counted.calls.length).toBeGreaterThanOrEqual(5);
    expect(kept).toEqual(counted);
    if (dialect === 'postgres') {
      // Concurrent writers wrote to shards of their own.
      const [shards] = await db.query('SELECT COUNT(DISTINCT shard) AS n FROM tool_call_counts');
      expect(Number(shards!.n)).toBeGreaterThan(1);
    }
  }, 60_000);

  it('start from a count of the rows already there when the migration adds them', async () => {
    const db = await database(dialect);
    cleanups.push(() => db.drop());
    const store = await openStore(db.url, { migrate: true });
    cleanups.push(() => store.close());
    const [{ v }] = (await db.query('SELECT MAX(version) AS v FROM schema_migrations')) as [{ v: unknown }];
    // Back to the schema before the counts: their triggers, tables and version row gone.
    for (const sql of dialect === 'postgres'
      ? [
          'DROP TRIGGER tool_executions_count_inserted ON tool_executions',
          'DROP TRIGGER tool_executions_count_updated ON tool_executions',
          'DROP TRIGGER runs_count_inserted ON runs',
          'DROP TRIGGER runs_count_updated ON runs',
          'DROP FUNCTION oncely_count_calls_added()',
          'DROP FUNCTION oncely_count_calls_moved()',
          'DROP FUNCTION oncely_count_runs_added()',
          'DROP FUNCTION oncely_count_runs_moved()',
          'DROP FUNCTION oncely_count_shard()',
          'DROP TABLE tool_call_counts',
          'DROP TABLE run_counts',
        ]
      : [
          'DROP TRIGGER tool_executions_count_inserted',
          'DROP TRIGGER tool_executions_count_updated',
          'DROP TRIGGER runs_count_inserted',
          'DROP TRIGGER runs_count_updated',
          'DROP TABLE tool_call_counts',
          'DROP TABLE run_counts',
        ]) {
      await db.query(sql);
    }
    // The counts' migration (PostgreSQL 0017, SQLite 0015) and any after it are applied again.
    const counts = dialect === 'postgres' ? 17 : 15;
    await db.query(`DELETE FROM schema_migrations WHERE version >= ${counts}`);
    await writer(store, 0, 2);
    expect((await store.migrate()).applied).toHaveLength(Number(v) - counts + 1);
    const { kept, counted } = await countsAndRows(store, db);
    expect(counted.calls.length).toBeGreaterThanOrEqual(5);
    expect(kept).toEqual(counted);
  }, 60_000);
});
