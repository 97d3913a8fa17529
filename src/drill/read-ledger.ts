import Database from 'better-sqlite3';
import { loadOptional } from '../util/optional-package.js';
import type { Ledger } from './checks.js';

/*
 * The drill reads the ledger with plain SQL on connections of its own (PostgreSQL's driver, or the
 * SQLite file opened read-only), not through oncely's store: the check must not trust the code it
 * checks. Both schemas name their tables and columns alike.
 */

type Row = Record<string, unknown>;

export interface LedgerReader {
  /** Runs of the tenant in a final state. */
  settledRuns(tenantId: string): Promise<number>;
  /** Calls of the tenant still unknown (`started` or `indeterminate`). */
  unknownCalls(tenantId: string): Promise<number>;
  /** Lease owners of the tenant's running runs, with how many each holds. */
  heldRuns(tenantId: string): Promise<Map<string, number>>;
  read(tenantId: string): Promise<Ledger>;
  close(): Promise<void>;
}

const SQL = {
  settled: `SELECT count(*) AS n FROM runs WHERE tenant_id = $1 AND status IN ('completed', 'failed', 'cancelled')`,
  unknown: `SELECT count(*) AS n FROM tool_executions WHERE tenant_id = $1 AND status IN ('started', 'indeterminate')`,
  held: `SELECT lease_owner, count(*) AS n FROM runs
    WHERE tenant_id = $1 AND status = 'running' AND lease_owner IS NOT NULL GROUP BY lease_owner`,
  runs: `SELECT run_id, agent, status, status_reason FROM runs WHERE tenant_id = $1 ORDER BY run_id`,
  records: `SELECT idempotency_key, run_id, tool_call_id, tool_name, status, attempt, result_reference,
    settled_by_kind, conflict_at FROM tool_executions WHERE tenant_id = $1`,
  history: `SELECT idempotency_key, at, actor_kind, actor_id, via, from_status, to_status, attempt
    FROM tool_execution_events WHERE tenant_id = $1 ORDER BY id`,
  events: `SELECT run_id, seq, at, type, data FROM run_events
    WHERE tenant_id = $1 AND type IN ('run.claimed', 'model.response') ORDER BY run_id, seq`,
} as const;

export async function openLedgerReader(url: string): Promise<LedgerReader> {
  if (url.startsWith('sqlite:')) {
    const db = new Database(url.slice('sqlite:'.length), { readonly: true, fileMustExist: true });
    db.pragma('busy_timeout = 5000');
    const all = (sql: string, tenantId: string): Row[] =>
      db.prepare(sql.replace(/\$1/g, '?')).all(tenantId) as Row[];
    return {
      settledRuns: (tenantId) => Promise.resolve(Number(all(SQL.settled, tenantId)[0]?.n ?? 0)),
      unknownCalls: (tenantId) => Promise.resolve(Number(all(SQL.unknown, tenantId)[0]?.n ?? 0)),
      heldRuns: (tenantId) => Promise.resolve(toHeld(all(SQL.held, tenantId))),
      read: (tenantId) => Promise.resolve(toLedger((sql) => all(sql, tenantId))),
      close: () => Promise.resolve(void db.close()),
    };
  }
  // pg is an optional peer dependency, loaded for a PostgreSQL ledger only.
  const { default: pg } = await loadOptional(
    { name: 'pg', neededBy: 'the drill on PostgreSQL' },
    () => import('pg'),
  );
  // A pool of one: a connection lost with a server restart is replaced at the next read.
  const client = new pg.Pool({ connectionString: url, max: 1 });
  client.on('error', () => undefined);
  return {
    settledRuns: async (tenantId) =>
      Number((await client.query<Row>(SQL.settled, [tenantId])).rows[0]?.n ?? 0),
    unknownCalls: async (tenantId) =>
      Number((await client.query<Row>(SQL.unknown, [tenantId])).rows[0]?.n ?? 0),
    heldRuns: async (tenantId) => toHeld((await client.query<Row>(SQL.held, [tenantId])).rows),
    read: async (tenantId) => {
      const rows = new Map<string, Row[]>();
      for (const sql of [SQL.runs, SQL.records, SQL.history, SQL.events]) {
        rows.set(sql, (await client.query<Row>(sql, [tenantId])).rows);
      }
      return toLedger((sql) => rows.get(sql) ?? []);
    },
    close: () => client.end(),
  };
}

const time = (v: unknown): number =>
  v instanceof Date ? v.getTime() : typeof v === 'string' ? Date.parse(v) : Number.NaN;
const text = (v: unknown): string | null =>
  typeof v === 'string' ? v : typeof v === 'number' || typeof v === 'bigint' ? String(v) : null;
const json = (v: unknown): Record<string, unknown> =>
  (typeof v === 'string' ? JSON.parse(v) : (v ?? {})) as Record<string, unknown>;

const toHeld = (rows: Row[]): Map<string, number> =>
  new Map(rows.map((r) => [String(r.lease_owner), Number(r.n)]));

function toLedger(rows: (sql: string) => Row[]): Ledger {
  return {
    runs: rows(SQL.runs).map((r) => ({
      runId: String(r.run_id),
      agent: String(r.agent),
      status: String(r.status),
      reason: text(r.status_reason),
    })),
    records: rows(SQL.records).map((r) => ({
      key: String(r.idempotency_key),
      runId: String(r.run_id),
      toolCallId: String(r.tool_call_id),
      toolName: String(r.tool_name),
      status: String(r.status),
      attempt: Number(r.attempt),
      resultReference: text(r.result_reference),
      settledBy: text(r.settled_by_kind),
      conflict: r.conflict_at !== null && r.conflict_at !== undefined,
    })),
    history: rows(SQL.history).map((r) => ({
      key: String(r.idempotency_key),
      at: time(r.at),
      actorKind: String(r.actor_kind),
      actorId: String(r.actor_id),
      via: String(r.via),
      from: text(r.from_status),
      to: text(r.to_status),
      attempt: Number(r.attempt),
    })),
    events: rows(SQL.events).map((r) => ({
      runId: String(r.run_id),
      seq: Number(r.seq),
      at: time(r.at),
      type: String(r.type),
      data: json(r.data),
    })),
  };
}
