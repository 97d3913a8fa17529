import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent } from '../../src/agents/index.js';
import { Ledger, executeToolCall, executeToolCalls } from '../../src/calls/index.js';
import { scriptedModel } from '../../src/models/index.js';
import { Runtime } from '../../src/runs/index.js';
import { openStore } from '../../src/store/index.js';
import { hotStatements } from '../../src/store/postgres/prepared.js';
import { stepGroupStatement } from '../../src/store/postgres/steps.js';
import { HOT_SETTINGS } from '../../src/store/postgres/postgres-store.js';
import { UNKNOWN_CALLS, UNKNOWN_CALLS_OF_ALL_TENANTS } from '../../src/store/monitor-sql.js';
import { APPROVALS_PAGE, LIST_WAITING, RUN_EVENTS } from '../../src/store/runs-sql.js';
import { defineTool, external } from '../../src/tools/index.js';
import { createTestDatabase } from '../support/databases.js';

/*
 * The hot statements run under generic plans (made once per connection, without the values). Each
 * must reach its rows by primary key alone on a table that has grown without statistics (no ANALYZE
 * has run: autovacuum off, or not yet): a plan that scanned a listing index would read every row of
 * the tenant at every call. Checked on real PostgreSQL, with EXPLAIN of each statement's generic plan.
 */

const TENANT = 'acme';
const ROWS = 5_000;

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

/** Every node of a plan that reads a table: its type, table and index. */
function scans(node: PlanNode): string[] {
  const own =
    node['Relation Name'] !== undefined && node['Node Type'] !== 'ModifyTable'
      ? [
          `${node['Node Type']} on ${node['Relation Name']}${node['Index Name'] ? ` using ${node['Index Name']}` : ''}`,
        ]
      : [];
  return [...own, ...(node.Plans ?? []).flatMap(scans)];
}

describe('generic plans of the hot statements (PostgreSQL)', () => {
  let db: { url: string; drop(): Promise<void> };

  beforeAll(async () => {
    db = await createTestDatabase('plans');
    const store = await openStore(db.url, { migrate: true });
    const tool = defineTool({
      name: 'plans_effect',
      description: 'keyed no-op',
      input: z.object({ n: z.number() }),
      effect: external(),
      execute: (args) => args,
    });
    const step = { toolCalls: [1, 2].map((n) => ({ toolName: tool.name, input: { n } })) };
    const agent = defineAgent({
      name: 'plans',
      instructions: 'x',
      model: scriptedModel([step, { text: 'done' }]),
      tools: [tool],
    });
    const runtime = new Runtime(store, { agents: [agent], owner: 'plans' });
    try {
      // Every hot statement runs once: a run of a step of two calls, a guarded call and its replay, a renewal.
      const { run } = await runtime.startRun({ tenantId: TENANT, agent: 'plans', input: 'go' });
      expect((await runtime.drive(TENANT, run.runId)).status).toBe('completed');
      expect((await store.runs.summary(TENANT, run.runId))?.status).toBe('completed');
      const ledger = new Ledger(store, { actorId: 'plans' });
      const call = { tenantId: TENANT, runId: 'run_guarded', toolCallId: 'c1' };
      await executeToolCall(ledger, tool, { n: 1 }, call);
      await executeToolCall(ledger, tool, { n: 1 }, call);
      // In a conversation, and one whose repeats are allowed (reserved without the repeat check).
      await executeToolCalls(ledger, [
        { ...call, tool, args: { n: 4 }, toolCallId: 'c4', conversationId: 'conv_1' },
      ]);
      await executeToolCall(ledger, tool, { n: 5 }, { ...call, toolCallId: 'c5' }, { onRepeat: 'allow' });
      await executeToolCalls(
        ledger,
        [2, 3].map((n) => ({
          tool,
          args: { n },
          tenantId: TENANT,
          runId: 'run_guarded',
          toolCallId: `c${n}`,
        })),
      );
      await store.runs.renewLease({ tenantId: TENANT, runId: run.runId, leaseEpoch: 1 }, 'plans', 1_000);
      expect(await store.runs.claimNext('plans', 1_000, ['plans'])).toBeUndefined();
      // A re-opening that does not apply (the record is not failed): the record is read as it stands.
      const record = await store.ledger.get(TENANT, `${call.runId}:${call.toolCallId}`);
      expect(record?.status).toBe('completed');
      const reopen = { ...record!, attemptTimeoutMs: 1_000, reopenVersion: record!.version };
      const [answer] = await store.ledger.reserve([reopen], {
        kind: 'runtime',
        id: 'plans',
      });
      expect(answer?.kind).toBe('existing');
    } finally {
      await runtime.close();
      await store.close();
    }
  });
  afterAll(() => db.drop());

  it(`reaches each row by primary key on tables of ${ROWS} rows of one tenant that were never analyzed`, async () => {
    const statements = new Map(hotStatements());
    // The group commit's statements of two runs' step writes (each part planned as the single one).
    statements.set('oncely_reserve_steps_2', stepGroupStatement('reserve', 2));
    statements.set('oncely_record_steps_2', stepGroupStatement('record', 2));
    expect([...statements.keys()].sort()).toEqual(
      expect.arrayContaining([
        'oncely_claim',
        'oncely_claim_next',
        'oncely_create_run',
        'oncely_get_many',
        'oncely_get_run',
        'oncely_record_step',
        'oncely_renew',
        'oncely_repeats_run',
        'oncely_reserve',
        'oncely_reserve_one',
        'oncely_reserve_one_unless_conversation',
        'oncely_reserve_one_unless_run',
        'oncely_reserve_step',
        'oncely_run_summary',
        'oncely_save',
        'oncely_transition',
      ]),
    );
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    // A connection whose plans are made while the tables are young (a run's few rows), as a worker's
    // are on a new database, and kept while the tables grow: its plans are checked on the grown tables.
    const young = new pg.Client({ connectionString: db.url });
    await young.connect();
    const explain = async (on: pg.Client, name: string, text: string): Promise<string[]> => {
      const params = Math.max(0, ...[...text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
      const { rows } = await on.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
        `EXPLAIN (FORMAT JSON) EXECUTE ${name}(${Array.from({ length: params }, () => 'NULL').join(', ')})`,
      );
      return scans(rows[0]!['QUERY PLAN'][0].Plan);
    };
    try {
      for (const [setting, value] of Object.entries(HOT_SETTINGS)) {
        await client.query(`SET ${setting} = ${value}`);
        await young.query(`SET ${setting} = ${value}`);
      }
      for (const [name, text] of statements) {
        await young.query(`PREPARE ${name} AS ${text}`);
        await explain(young, name, text); // the generic plan, made now and kept
      }
      await client.query(
        `INSERT INTO runs (tenant_id, run_id, agent, status, input, checkpoint_version, message_count)
         SELECT $1, 'run_' || g, 'plans', CASE WHEN g % 2 = 0 THEN 'running' ELSE 'completed' END, '{}', 1, 4
         FROM generate_series(1, $2) g`,
        [TENANT, ROWS],
      );
      await client.query(
        `INSERT INTO run_messages (tenant_id, run_id, idx, message)
         SELECT $1, 'run_' || g, i, '{"role": "user", "content": "x"}' FROM generate_series(1, $2) g, generate_series(0, 3) i`,
        [TENANT, ROWS],
      );
      await client.query(
        `INSERT INTO tool_executions (tenant_id, idempotency_key, run_id, tool_call_id, tool_name, effect, args,
           args_digest, status, attempt, version)
         SELECT $1, 'key_' || g, 'run_' || g, 'c', 'plans_effect', 'write', '{}', 'd',
           CASE WHEN g % 2 = 0 THEN 'started' ELSE 'completed' END, 1, 1
         FROM generate_series(1, $2) g`,
        [TENANT, ROWS],
      );
      const { rows: analyzed } = await client.query<{ n: string }>(
        `SELECT count(*) AS n FROM pg_stat_user_tables
         WHERE relname IN ('runs', 'tool_executions', 'run_messages') AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)`,
      );
      expect(Number(analyzed[0]?.n)).toBe(0);
      const found = new Map<string, string[]>();
      const keptYoung = new Map<string, string[]>();
      for (const [name, text] of statements) {
        await client.query(`PREPARE ${name} AS ${text}`);
        found.set(name, await explain(client, name, text));
        keptYoung.set(name, await explain(young, name, text));
      }
      // Plans made on the young tables and kept while they grew: no sequential scan of a grown table.
      // (A listing index may tie with the primary key on a table of a few rows; such a plan is made
      // anew as executions double past REPLAN_FROM, prepared.ts.)
      for (const [name, read] of keptYoung) {
        for (const scan of read) expect(`${name} (planned young): ${scan}`).toMatch(/: Index Scan on /);
      }
      // The claim of the next run is checked below, once the backlog has statistics.
      found.delete('oncely_claim_next');
      for (const [name, read] of found) {
        // The repeat lookup reaches its rows by the repeats index, one descent per digest.
        if (name.startsWith('oncely_repeats_')) {
          for (const scan of read)
            expect(`${name}: ${scan}`).toMatch(
              /: Index Scan on tool_executions using tool_executions_repeats$/,
            );
          continue;
        }
        // A guarded call's reservation with its repeat check: one descent of the repeats index (the
        // earlier call), and the key's own record by primary key.
        if (name.startsWith('oncely_reserve_one_unless_')) {
          expect(read.map((scan) => `${name}: ${scan}`).sort()).toEqual([
            `${name}: Index Scan on tool_executions using tool_executions_pkey`,
            `${name}: Index Scan on tool_executions using tool_executions_repeats`,
          ]);
          continue;
        }
        for (const scan of read) {
          expect(`${name}: ${scan}`).toMatch(
            /: Index Scan on (runs using runs_pkey|tool_executions using tool_executions_pkey|run_messages using run_messages_pkey)$/,
          );
        }
      }
      // The claim of the next run, over a backlog of 5,000 claimable runs with statistics (a worker's
      // claim on a busy server), reads the claim index in its order and stops at the first entry not
      // locked by another claimer: no sort of the backlog.
      await client.query('ANALYZE runs');
      const claimNext = statements.get('oncely_claim_next')!;
      await client.query(`PREPARE claim_analyzed AS ${claimNext}`);
      const { rows: claimPlan } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
        'EXPLAIN (FORMAT JSON) EXECUTE claim_analyzed(NULL, NULL, NULL)',
      );
      const plan = claimPlan[0]!['QUERY PLAN'][0].Plan;
      expect(scans(plan)).toEqual([
        'Index Scan on runs using runs_claim',
        'Index Scan on runs using runs_pkey',
        'Index Scan on run_messages using run_messages_pkey',
      ]);
      expect(JSON.stringify(plan)).not.toContain('"Node Type":"Sort"');
      // A page of the sweep of waiting runs, over 5,000 waiting runs with statistics, first and after
      // a cursor: a range of runs_waiting in its order, no sort.
      await client.query(
        `INSERT INTO runs (tenant_id, run_id, agent, status, input, checkpoint_version, updated_at)
         SELECT $1, 'waiting_' || g, 'plans',
           CASE WHEN g % 2 = 0 THEN 'awaiting_approval' ELSE 'awaiting_reconciliation' END, '{}', 1,
           now() - make_interval(secs => g)
         FROM generate_series(1, $2) g`,
        [TENANT, ROWS],
      );
      await client.query('ANALYZE runs');
      await client.query('SET plan_cache_mode = force_custom_plan');
      await client.query(`PREPARE list_waiting AS ${LIST_WAITING.postgres}`);
      for (const args of [
        `'awaiting_approval', 100, NULL, NULL, NULL`,
        `'awaiting_reconciliation', 100, now() - interval '1 hour', '${TENANT}', 'waiting_7'`,
      ]) {
        const { rows: page } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
          `EXPLAIN (FORMAT JSON) EXECUTE list_waiting(${args})`,
        );
        const pagePlan = page[0]!['QUERY PLAN'][0].Plan;
        expect(scans(pagePlan)).toEqual(['Index Scan on runs using runs_waiting']);
        expect(JSON.stringify(pagePlan)).not.toMatch(/"Node Type":"(Incremental )?Sort"/);
      }
      // A page of a run's events (a stream reading on), and of a tenant's pending approvals (the
      // operators' inbox), over 5,000 rows each with statistics: a range of an index, no sort.
      await client.query(
        `INSERT INTO run_events (tenant_id, run_id, seq, type, data)
         SELECT $1, 'waiting_1', g, 'model.response', '{}' FROM generate_series(1, $2) g`,
        [TENANT, ROWS],
      );
      await client.query(
        `INSERT INTO approvals (tenant_id, idempotency_key, run_id, tool_name, args, args_digest, status, created_at)
         SELECT $1, 'waiting_' || g || ':call_1', 'waiting_' || g, 'plans_effect', '{}', 'd',
           CASE WHEN g % 2 = 0 THEN 'pending' ELSE 'approved' END, now() - make_interval(secs => g)
         FROM generate_series(1, $2) g`,
        [TENANT, ROWS],
      );
      await client.query('ANALYZE run_events, approvals');
      const pages: [string, { text: string; values: unknown[] }][] = [
        ['run_events_pkey', { text: RUN_EVENTS.postgres, values: [TENANT, 'waiting_1', 2_000, 100] }],
        ['approvals_pending', APPROVALS_PAGE.postgres(TENANT, { statuses: ['pending'], limit: 50 })],
        [
          'approvals_pending',
          APPROVALS_PAGE.postgres(TENANT, {
            statuses: ['pending'],
            limit: 50,
            after: { at: new Date(Date.now() - 3_600_000).toISOString(), key: 'waiting_7:call_1' },
          }),
        ],
      ];
      for (const [index, { text, values }] of pages) {
        const { rows: explained } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>({
          text: `EXPLAIN (FORMAT JSON) ${text}`,
          values,
        });
        const listPlan = explained[0]!['QUERY PLAN'][0].Plan;
        expect(scans(listPlan)).toEqual([
          expect.stringMatching(new RegExp(`^Index Scan on \\w+ using ${index}$`)),
        ]);
        expect(JSON.stringify(listPlan)).not.toMatch(/"Node Type":"(Incremental )?Sort"/);
      }
      // The unknown-calls page (the operators' inbox) over 5,000 calls in flight (started a moment ago,
      // each with a minute to run, their runs held by a live worker) and 30 unknown ones (fewer than a page) (over, their
      // runs' leases expired): a range of tool_executions_unknown in its order that ends at the first
      // deadline not yet passed, so not one call in flight is read to fill the page, and no sort.
      await client.query(
        `INSERT INTO tool_executions (tenant_id, idempotency_key, run_id, tool_call_id, tool_name, effect, args,
           args_digest, status, attempt, version, attempt_timeout_ms, attempt_started_at)
         SELECT $1, 'flight_' || g, 'run_' || (2 * g), 'c', 'plans_effect', 'write', '{}'::jsonb, 'd', 'started', 1, 1,
           60000, now() - make_interval(secs => g % 30)
         FROM generate_series(1, $2) g
         UNION ALL
         SELECT $1, 'lost_' || g, 'run_' || (2 * g + 1), 'c', 'plans_effect', 'write', '{}'::jsonb, 'd',
           CASE WHEN g % 2 = 0 THEN 'started' ELSE 'indeterminate' END, 1, 1, 1000, now() - make_interval(mins => g)
         FROM generate_series(1, 30) g`,
        [TENANT, ROWS],
      );
      await client.query(
        `UPDATE runs SET lease_expires_at = now() + interval '1 hour' WHERE status = 'running'`,
      );
      await client.query('ANALYZE tool_executions, runs');
      for (const after of [null, 15]) {
        const { rows: explained } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>({
          text: `EXPLAIN (ANALYZE, FORMAT JSON) ${UNKNOWN_CALLS.postgres}`,
          values: [
            TENANT,
            null,
            null,
            after === null ? null : Date.now() - after * 60_000,
            after === null ? null : 'lost_15',
            50,
            5_000,
          ],
        });
        const unknownPlan = explained[0]!['QUERY PLAN'][0].Plan;
        expect(scans(unknownPlan)).toEqual([
          'Index Scan on tool_executions using tool_executions_unknown',
          'Index Scan on runs using runs_pkey',
        ]);
        expect(JSON.stringify(unknownPlan)).not.toMatch(/"Node Type":"(Incremental )?Sort"/);
        // Rows the index scan read: those it returned and those its filter removed.
        const read = (
          node: PlanNode & { 'Actual Rows'?: number; 'Rows Removed by Filter'?: number },
        ): number =>
          (node['Index Name'] === 'tool_executions_unknown'
            ? (node['Actual Rows'] ?? 0) + (node['Rows Removed by Filter'] ?? 0)
            : 0) + (node.Plans ?? []).reduce((n, p) => n + read(p), 0);
        expect(read(unknownPlan)).toBeLessThanOrEqual(30);
      }
      // The reconcile sweep's page of every tenant's unknown calls, first and after a cursor: a range
      // of tool_executions_unknown_all in its order, ending at the first deadline not yet passed.
      for (const after of [null, 15]) {
        const { rows: explained } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>({
          text: `EXPLAIN (ANALYZE, FORMAT JSON) ${UNKNOWN_CALLS_OF_ALL_TENANTS.postgres}`,
          values: [
            5_000,
            after === null ? null : Date.now() - after * 60_000,
            after === null ? null : TENANT,
            after === null ? null : 'lost_15',
            80,
          ],
        });
        const sweepPlan = explained[0]!['QUERY PLAN'][0].Plan;
        expect(scans(sweepPlan)).toEqual([
          'Index Scan on tool_executions using tool_executions_unknown_all',
          'Index Scan on runs using runs_pkey',
        ]);
        expect(JSON.stringify(sweepPlan)).not.toMatch(/"Node Type":"(Incremental )?Sort"/);
        const read = (
          node: PlanNode & { 'Actual Rows'?: number; 'Rows Removed by Filter'?: number },
        ): number =>
          (node['Index Name'] === 'tool_executions_unknown_all'
            ? (node['Actual Rows'] ?? 0) + (node['Rows Removed by Filter'] ?? 0)
            : 0) + (node.Plans ?? []).reduce((n, p) => n + read(p), 0);
        expect(read(sweepPlan)).toBeLessThanOrEqual(30);
      }
      // The step's writes do read their rows (the check above is not vacuous).
      expect(found.get('oncely_record_step')).toContain(
        'Index Scan on tool_executions using tool_executions_pkey',
      );
      expect(found.get('oncely_save')).toContain('Index Scan on runs using runs_pkey');
    } finally {
      await client.end();
      await young.end();
    }
  });
});
