import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../../src/store/index.js';
import { loadMigrations } from '../../src/store/migrations.js';
import { createTestDatabase } from '../support/databases.js';

/*
 * Schema 0005 on a PostgreSQL database that already holds runs and calls at schema 0004: the history
 * tables lose their foreign keys and an index each, keep every row, and go on being written and read
 * in order; runs refuse DELETE from then on.
 */

const TENANT = 'acme';

describe('migration 0005 (lean writes) on PostgreSQL with data', () => {
  let db: { url: string; drop(): Promise<void> };
  let raw: pg.Client;
  let store: Store;

  beforeAll(async () => {
    db = await createTestDatabase('lean_writes');
    raw = new pg.Client({ connectionString: db.url });
    await raw.connect();
    // The schema as a store of the version before would have left it, with its rows.
    await raw.query(`CREATE TABLE schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    for (const m of loadMigrations('postgres').filter((m) => m.version <= 4)) {
      await raw.query(m.sql);
      await raw.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
    }
    await raw.query(`
      INSERT INTO runs (tenant_id, run_id, agent, status, input, checkpoint, checkpoint_version, event_seq)
      VALUES ('${TENANT}', 'run_old', 'billing', 'awaiting_reconciliation', '"credit"',
              '{"messages": [], "step": 1, "pending": null}', 3, 2);
      INSERT INTO run_events (tenant_id, run_id, seq, type, data)
      VALUES ('${TENANT}', 'run_old', 1, 'run.created', '{"agent": "billing", "status": "queued"}'),
             ('${TENANT}', 'run_old', 2, 'run.claimed', '{"owner": "w", "epoch": 1, "driveAttempt": 1}');
      INSERT INTO tool_executions (tenant_id, idempotency_key, run_id, tool_call_id, tool_name, effect, args,
        args_digest, status, attempt, version, attempt_timeout_ms)
      VALUES ('${TENANT}', 'run_old:call_1', 'run_old', 'call_1', 'issue_credit', 'write', '{"cents": 2500}',
              'digest', 'started', 1, 1, 30000);
      INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
        from_status, to_status, attempt, reason)
      VALUES ('${TENANT}', 'run_old:call_1', 'transition', 'runtime', 'w', 'reserve', NULL, 'started', 1, 'reserved');`);
    store = await openStore(db.url, { migrate: true });
  });
  afterAll(async () => {
    await store?.close();
    await raw?.end();
    await db?.drop();
  });

  it('keeps every row, drops the foreign keys and the second index of each history table', async () => {
    expect(await store.schemaState()).toMatchObject({ state: 'current' });
    const { rows: fks } = await raw.query(`SELECT conname FROM pg_constraint WHERE contype = 'f'`);
    expect(fks).toEqual([]);
    const { rows: indexes } = await raw.query<{ table: string; index: string; primary: boolean }>(`
      SELECT t.relname AS table, i.relname AS index, x.indisprimary AS primary
      FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
      WHERE t.relname IN ('run_events', 'tool_execution_events') ORDER BY 1, 2`);
    expect(indexes).toEqual([
      { table: 'run_events', index: 'run_events_pkey', primary: true },
      { table: 'tool_execution_events', index: 'tool_execution_events_pkey', primary: true },
    ]);
    const events = await store.runs.events(TENANT, 'run_old', 0, 10);
    expect(events.map((e) => [e.seq, e.type])).toEqual([
      [1, 'run.created'],
      [2, 'run.claimed'],
    ]);
    const history = await store.ledger.history(TENANT, 'run_old:call_1');
    expect(history.map((e) => [e.from, e.to, e.reason])).toEqual([[null, 'started', 'reserved']]);
  });

  it('goes on writing the history of an old record in order, and refuses to delete a run', async () => {
    const record = await store.ledger.get(TENANT, 'run_old:call_1');
    expect(record?.status).toBe('started');
    const moved = await store.ledger.transition({
      tenantId: TENANT,
      idempotencyKey: 'run_old:call_1',
      to: 'completed',
      via: 'resolve',
      actor: { kind: 'operator', id: 'ops-ana' },
      expect: { status: 'started', version: record!.version },
      result: { credited: 2500 },
      reason: 'the provider shows the credit',
      recordIgnored: true,
    });
    expect(moved).toMatchObject({ applied: true, record: { status: 'completed', version: 2 } });
    const history = await store.ledger.history(TENANT, 'run_old:call_1');
    expect(history.map((e) => e.to)).toEqual(['started', 'completed']);
    await expect(raw.query(`DELETE FROM runs WHERE run_id = 'run_old'`)).rejects.toThrow(
      /append-only|refused/,
    );
    expect((await store.runs.get(TENANT, 'run_old'))?.status).toBe('awaiting_reconciliation');
  });
});
