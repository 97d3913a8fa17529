import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent } from '../../src/agents/index.js';
import { argsDigest } from '../../src/ledger/index.js';
import { scriptedModel } from '../../src/models/index.js';
import type { Checkpoint, RunStatus } from '../../src/run-state/index.js';
import { Runtime } from '../../src/runs/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { loadMigrations } from '../../src/store/migrations.js';
import { defineTool, write } from '../../src/tools/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';

/*
 * Schema 0007 on a database that holds runs at schema 0006, in every status, one of them mid-step (a
 * response saved, one call told and one not): each run's checkpoint moves to append-only message rows
 * and the runs row, reads back exactly as it was, and the mid-step run is driven on to its end from
 * there (its settled call replayed from the ledger, not run again).
 */

const TENANT = 'acme';
const CREDIT = { cents: 2500 };

const user = { role: 'user', content: 'Credit acct_7 $25' };
const response = {
  role: 'assistant',
  content: [
    { type: 'tool-call', toolCallId: 'call_told', toolName: 'issue_credit', input: CREDIT },
    { type: 'tool-call', toolCallId: 'call_open', toolName: 'issue_credit', input: { cents: 100 } },
  ],
};

/** Every status a run can be in, with a checkpoint as schema 0006 stored it. */
const OLD_RUNS: { id: string; status: RunStatus; version: number; checkpoint: Checkpoint }[] = [
  {
    id: 'run_queued',
    status: 'queued',
    version: 1,
    checkpoint: { messages: [user], step: 0, pending: null },
  },
  {
    id: 'run_mid',
    status: 'running',
    version: 2,
    checkpoint: {
      messages: [user, response],
      step: 1,
      pending: {
        calls: [
          {
            toolCallId: 'call_told',
            toolName: 'issue_credit',
            input: CREDIT,
            heard: { kind: 'completed', type: 'json', value: { credited: 2500 } },
          },
          { toolCallId: 'call_open', toolName: 'issue_credit', input: { cents: 100 } },
        ],
      },
    },
  },
  ...(['awaiting_approval', 'awaiting_reconciliation'] as const).map((status) => ({
    id: `run_${status}`,
    status,
    version: 2,
    checkpoint: {
      messages: [user, response],
      step: 1,
      pending: { calls: [{ toolCallId: 'call_open', toolName: 'issue_credit', input: { cents: 100 } }] },
    },
  })),
  ...(['completed', 'failed', 'cancelled'] as const).map((status) => ({
    id: `run_${status}`,
    status,
    version: 3,
    checkpoint: {
      messages: [user, { role: 'assistant', content: [{ type: 'text', text: `it ${status}` }] }],
      step: 1,
      pending: null,
    },
  })),
];

/** A synchronous call's value or error as a promise. */
function settled<T>(fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (error) {
    return Promise.reject(error instanceof Error ? error : new Error(String(error)));
  }
}

interface Raw {
  exec(sql: string, params?: unknown[]): Promise<void>;
  rows<T>(sql: string): Promise<T[]>;
  close(): Promise<void>;
}

const DIALECTS: [string, () => Promise<{ url: string; raw: Raw; cleanup(): Promise<void> }>][] = [
  [
    'postgres',
    async () => {
      const db = await createTestDatabase('append_only');
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      await client.query(`CREATE TABLE schema_migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      for (const m of loadMigrations('postgres').filter((m) => m.version <= 6)) {
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
          m.version,
          m.name,
        ]);
      }
      const raw: Raw = {
        exec: async (sql, params) => void (await client.query(sql, params)),
        rows: async <T>(sql: string) => (await client.query(sql)).rows as T[],
        close: () => client.end(),
      };
      return { url: db.url, raw, cleanup: () => db.drop() };
    },
  ],
  [
    'sqlite',
    () => {
      const file = tempSqlitePath('append-only');
      const db = new Database(file.path);
      db.exec(`CREATE TABLE schema_migrations (
        version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT`);
      for (const m of loadMigrations('sqlite').filter((m) => m.version <= 6)) {
        db.exec(m.sql);
        db.prepare('INSERT INTO schema_migrations VALUES (?, ?, ?)').run(m.version, m.name, 'then');
      }
      let n = 0;
      const raw: Raw = {
        // $1, $2… (each once, in order) become ?; now() becomes a fixed ISO time.
        exec: (sql, params) => {
          const text = sql.replace(/\$\d+/g, '?').replace(/now\(\)/g, `'2026-01-01T00:00:0${n++ % 10}.000Z'`);
          return settled(() => {
            if (params === undefined) db.exec(text);
            else db.prepare(text).run(...params);
          });
        },
        rows: <T>(sql: string) => settled(() => db.prepare(sql).all() as T[]),
        close: () =>
          settled(() => {
            db.close();
          }),
      };
      return Promise.resolve({
        url: `sqlite:${file.path}`,
        raw,
        cleanup: () => settled(() => file.cleanup()),
      });
    },
  ],
];

describe.each(DIALECTS)(
  'migration 0007 (append-only run history) on %s with runs in every status',
  (dialect, open) => {
    let opened: Awaited<ReturnType<typeof open>>;
    let store: Store;
    let executions = 0;

    beforeAll(async () => {
      opened = await open();
      const { raw } = opened;
      for (const run of OLD_RUNS) {
        const leased = run.status === 'running';
        await raw.exec(
          `INSERT INTO runs (tenant_id, run_id, agent, status, input, checkpoint, checkpoint_version, lease_owner,
           lease_epoch, lease_expires_at, created_at, updated_at)
         VALUES ($1, $2, 'billing', $3, $4, $5, $6, $7, $8, $9, now(), now())`,
          [
            TENANT,
            run.id,
            run.status,
            JSON.stringify(user.content),
            JSON.stringify(run.checkpoint),
            run.version,
            leased ? 'dead-worker' : null,
            leased ? 1 : 0,
            // The dead worker's lease expired long ago.
            leased ? '2020-01-01T00:00:00.000Z' : null,
          ],
        );
      }
      // The call the mid-step run has not told yet took effect: the ledger knows it.
      await raw.exec(
        `INSERT INTO tool_executions (tenant_id, idempotency_key, run_id, tool_call_id, tool_name, effect, args,
         args_digest, status, attempt, version, result, created_at, updated_at, attempt_started_at)
       VALUES ($1, 'run_mid:call_open', 'run_mid', 'call_open', 'issue_credit', 'write', $2, $3, 'completed', 1, 2,
         $4, now(), now(), now())`,
        [
          TENANT,
          JSON.stringify({ cents: 100 }),
          argsDigest({ cents: 100 }),
          JSON.stringify({ credited: 100 }),
        ],
      );
      store = await openStore(opened.url, { migrate: true });
    });

    afterAll(async () => {
      await store?.close();
      await opened?.raw.close();
      await opened?.cleanup();
    });

    it('moves every checkpoint into message rows and the runs row, and reads each back as it was', async () => {
      expect(await store.schemaState()).toEqual({
        state: 'current',
        version: loadMigrations(dialect === 'postgres' ? 'postgres' : 'sqlite').length,
      });
      for (const run of OLD_RUNS) {
        const now = await store.runs.get(TENANT, run.id);
        expect(now, run.id).toMatchObject({ status: run.status, checkpointVersion: run.version });
        expect(now?.checkpoint, run.id).toEqual(run.checkpoint);
        const summary = await store.runs.summary(TENANT, run.id);
        expect(summary?.checkpoint, run.id).toEqual({
          step: run.checkpoint.step,
          pending: run.checkpoint.pending,
        });
        expect(summary && 'messages' in summary.checkpoint).toBe(false);
      }
      const counts = await opened.raw.rows<{
        run_id: string;
        n: number | string;
        message_count: number | string;
      }>(
        `SELECT r.run_id, (SELECT count(*) FROM run_messages m WHERE m.tenant_id = r.tenant_id AND m.run_id = r.run_id) AS n,
         r.message_count FROM runs r ORDER BY r.run_id`,
      );
      for (const row of counts) {
        const expected = OLD_RUNS.find((r) => r.id === row.run_id)?.checkpoint.messages.length;
        expect([row.run_id, Number(row.n), Number(row.message_count)]).toEqual([
          row.run_id,
          expected,
          expected,
        ]);
      }
      const columns = await opened.raw.rows<{ name: string }>(
        dialect === 'postgres'
          ? `SELECT column_name AS name FROM information_schema.columns WHERE table_name = 'runs'`
          : `SELECT name FROM pragma_table_info('runs')`,
      );
      expect(columns.map((c) => c.name)).not.toContain('checkpoint');
      // The sweep reads the waiting runs' pending calls from their own column.
      const waiting = await store.runs.listWaiting('awaiting_reconciliation', 10);
      expect(waiting.map((w) => [w.runId, w.pending])).toEqual([
        [
          'run_awaiting_reconciliation',
          OLD_RUNS.find((r) => r.id === 'run_awaiting_reconciliation')?.checkpoint.pending,
        ],
      ]);
    });

    it('drives the mid-step run and the queued one on to their ends, appending to what was moved', async () => {
      const tool = defineTool({
        name: 'issue_credit',
        description: 'credits an account',
        input: z.object({ cents: z.number() }),
        effect: write(),
        execute: (args) => {
          executions += 1;
          return { credited: args.cents };
        },
      });
      const agent = defineAgent({
        name: 'billing',
        instructions: 'x',
        model: scriptedModel([{ text: 'done' }, { text: 'done' }]),
        tools: [tool],
      });
      const runtime = new Runtime(store, { agents: [agent], owner: 'after-0007' });
      try {
        const mid = await runtime.drive(TENANT, 'run_mid');
        expect(mid.status).toBe('completed');
        // Both calls were told from what stood (one heard before the move, one from the ledger); none ran.
        expect(executions).toBe(0);
        const messages = mid.checkpoint.messages as { role: string }[];
        expect(messages.slice(0, 2)).toEqual([user, response]);
        expect(messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
        const queued = await runtime.drive(TENANT, 'run_queued');
        expect(queued.status).toBe('completed');
        expect(queued.checkpoint.messages.map((m) => (m as { role: string }).role)).toEqual([
          'user',
          'assistant',
        ]);
        const rows = await opened.raw.rows<{ idx: number | string }>(
          `SELECT idx FROM run_messages WHERE run_id = 'run_mid' ORDER BY idx`,
        );
        expect(rows.map((r) => Number(r.idx))).toEqual([0, 1, 2, 3]);
      } finally {
        await runtime.close();
      }
    });

    it('refuses to change or delete a message once written', async () => {
      await expect(
        opened.raw.exec(`UPDATE run_messages SET message = '{}' WHERE run_id = 'run_mid'`),
      ).rejects.toThrow(/append-only/);
      await expect(opened.raw.exec(`DELETE FROM run_messages WHERE run_id = 'run_mid'`)).rejects.toThrow(
        /append-only/,
      );
    });
  },
);
