import type pg from 'pg';
import {
  RESERVABLE_STATUSES,
  settles,
  type Actor,
  type LedgerEvent,
  type ToolExecutionRecord,
} from '../../ledger/index.js';
import {
  UNKNOWN_PREDICATE,
  encodeJson,
  assertTransitionRequest,
  ignoredDetail,
  isUnknownSet,
  toEvent,
  toRecord,
  transitionColumns,
  type EventRow,
  type ExecutionRow,
} from '../rows.js';
import type {
  LedgerStore,
  ListFilter,
  NoteRequest,
  ReserveRequest,
  ReserveResult,
  TransitionRequest,
  TransitionResult,
} from '../store.js';

/** Anything that runs a query: the pool, or one client inside a transaction. */
export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

const [REOPENABLE] = RESERVABLE_STATUSES;

/**
 * All calls of one model response in one statement: insert each new key as `started`; take over a
 * `failed` record with the same arguments and tool (`attempt + 1`); leave every other record alone.
 * The rows it returns are the ones this caller now holds; the history event is written by the same
 * statement. Keys are inserted in sorted order so two overlapping batches cannot deadlock.
 */
const RESERVE = `
WITH req AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[],
                       $7::text[], $8::text[])
    AS r(idempotency_key, run_id, tool_call_id, tool_name, effect, args, args_digest, compensation_of)
), up AS (
  INSERT INTO tool_executions AS t (tenant_id, idempotency_key, run_id, tool_call_id, tool_name, effect,
    args, args_digest, status, attempt, version, compensation_of)
  SELECT $9, idempotency_key, run_id, tool_call_id, tool_name, effect, args, args_digest, 'started', 1, 1,
    compensation_of
  FROM req ORDER BY idempotency_key
  ON CONFLICT (tenant_id, idempotency_key) DO UPDATE SET
    status = 'started', attempt = t.attempt + 1, version = t.version + 1,
    updated_at = oncely_now(), attempt_started_at = oncely_now(),
    result = NULL, result_reference = NULL, error = NULL,
    settled_at = NULL, settled_by_kind = NULL, settled_by_id = NULL
  WHERE t.status = $10 AND t.args_digest = EXCLUDED.args_digest AND t.tool_name = EXCLUDED.tool_name
  RETURNING t.*
), ev AS (
  INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
    from_status, to_status, attempt, reason)
  SELECT tenant_id, idempotency_key, 'transition', $11, $12, 'reserve',
    CASE WHEN attempt = 1 THEN NULL ELSE $10 END, 'started', attempt,
    CASE WHEN attempt = 1 THEN 'reserved' ELSE 're-reserved after failed' END
  FROM up
)
SELECT * FROM up`;

const TRANSITION = `
WITH u AS (
  UPDATE tool_executions SET
    status = $3, version = version + 1, updated_at = oncely_now(),
    result = CASE WHEN $4 THEN $5::jsonb ELSE result END,
    result_reference = CASE WHEN $4 THEN $6 ELSE result_reference END,
    error = CASE WHEN $7 THEN $8::jsonb ELSE error END,
    settled_at = CASE WHEN $9 THEN oncely_now() ELSE settled_at END,
    settled_by_kind = CASE WHEN $9 THEN $10 ELSE settled_by_kind END,
    settled_by_id = CASE WHEN $9 THEN $11 ELSE settled_by_id END
  WHERE tenant_id = $1 AND idempotency_key = $2 AND status = $12 AND version = $13
  RETURNING *
), ev AS (
  INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
    from_status, to_status, attempt, reason, detail)
  SELECT tenant_id, idempotency_key, 'transition', $10, $11, $14, $12, $3, attempt, $15, $16::jsonb FROM u
)
SELECT * FROM u`;

/** Appends an event to an existing record, taking its current status and attempt. */
const EVENT_ON_CURRENT = `
INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
  from_status, to_status, attempt, reason, detail)
SELECT tenant_id, idempotency_key, $3, $4, $5, $6, status, $7, attempt, $8, $9::jsonb
FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = $2`;

const GET = `SELECT * FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = $2`;
const GET_MANY = `SELECT * FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = ANY($2::text[])`;
const HISTORY = `SELECT * FROM tool_execution_events WHERE tenant_id = $1 AND idempotency_key = $2 ORDER BY id`;

/** The ledger on PostgreSQL. Correctness rests on single statements and the primary key alone. */
export class PostgresLedger implements LedgerStore {
  constructor(private readonly db: Queryable) {}

  async reserve(requests: readonly ReserveRequest[], actor: Actor): Promise<ReserveResult[]> {
    const first = requests[0];
    if (first === undefined) return [];
    const reserved = await this.db.query<ExecutionRow>(RESERVE, [
      requests.map((r) => r.idempotencyKey),
      requests.map((r) => r.runId),
      requests.map((r) => r.toolCallId),
      requests.map((r) => r.toolName),
      requests.map((r) => r.effect),
      requests.map((r) => JSON.stringify(r.args)),
      requests.map((r) => r.argsDigest),
      requests.map((r) => r.compensationOf),
      first.tenantId,
      REOPENABLE,
      actor.kind,
      actor.id,
    ]);
    const held = new Map(reserved.rows.map((row) => [row.idempotency_key, toRecord(row)]));
    const others = requests.filter((r) => !held.has(r.idempotencyKey)).map((r) => r.idempotencyKey);
    const existing = new Map<string, ToolExecutionRecord>();
    if (others.length > 0) {
      const rows = await this.db.query<ExecutionRow>(GET_MANY, [first.tenantId, others]);
      for (const row of rows.rows) existing.set(row.idempotency_key, toRecord(row));
    }
    return requests.map((r) => {
      const mine = held.get(r.idempotencyKey);
      if (mine !== undefined) return { kind: 'reserved', record: mine };
      const record = existing.get(r.idempotencyKey);
      if (record === undefined)
        throw new Error(`reserve of ${r.idempotencyKey} wrote nothing and found nothing`);
      return { kind: 'existing', record };
    });
  }

  async transition(request: TransitionRequest): Promise<TransitionResult> {
    assertTransitionRequest(request);
    const columns = transitionColumns(request.to, request);
    const updated = await this.db.query<ExecutionRow>(TRANSITION, [
      request.tenantId,
      request.idempotencyKey,
      request.to,
      columns.setResult,
      encodeJson(columns.result),
      columns.resultReference,
      columns.setError,
      encodeJson(columns.error),
      settles(request.to),
      request.actor.kind,
      request.actor.id,
      request.expect.status,
      request.expect.version,
      request.via,
      request.reason,
      encodeJson(request.detail ?? null),
    ]);
    const row = updated.rows[0];
    if (row !== undefined) return { applied: true, record: toRecord(row) };
    if (request.recordIgnored) {
      await this.db.query(EVENT_ON_CURRENT, [
        request.tenantId,
        request.idempotencyKey,
        'ignored',
        request.actor.kind,
        request.actor.id,
        request.via,
        request.to,
        request.reason,
        encodeJson(ignoredDetail(request, true)),
      ]);
    }
    return { applied: false, record: await this.get(request.tenantId, request.idempotencyKey) };
  }

  async note(request: NoteRequest): Promise<void> {
    await this.db.query(EVENT_ON_CURRENT, [
      request.tenantId,
      request.idempotencyKey,
      'note',
      request.actor.kind,
      request.actor.id,
      null,
      null,
      request.reason,
      encodeJson(request.detail ?? null),
    ]);
  }

  async get(tenantId: string, idempotencyKey: string): Promise<ToolExecutionRecord | undefined> {
    const { rows } = await this.db.query<ExecutionRow>(GET, [tenantId, idempotencyKey]);
    return rows[0] === undefined ? undefined : toRecord(rows[0]);
  }

  async history(tenantId: string, idempotencyKey: string): Promise<LedgerEvent[]> {
    const { rows } = await this.db.query<EventRow>(HISTORY, [tenantId, idempotencyKey]);
    return rows.map(toEvent);
  }

  async list(tenantId: string, filter: ListFilter): Promise<ToolExecutionRecord[]> {
    const params: unknown[] = [tenantId];
    const where = ['tenant_id = $1'];
    const add = (sql: (n: string) => string, value: unknown): void => {
      params.push(value);
      where.push(sql(`$${params.length}`));
    };
    if (filter.statuses !== undefined && isUnknownSet(filter.statuses)) where.push(UNKNOWN_PREDICATE);
    else if (filter.statuses !== undefined) add((n) => `status = ANY(${n}::text[])`, filter.statuses);
    if (filter.runId !== undefined) add((n) => `run_id = ${n}`, filter.runId);
    if (filter.toolName !== undefined) add((n) => `tool_name = ${n}`, filter.toolName);
    if (filter.after !== undefined) {
      params.push(filter.after.at, filter.after.key);
      where.push(
        `(attempt_started_at, idempotency_key) > ($${params.length - 1}::timestamptz, $${params.length})`,
      );
    }
    params.push(filter.limit);
    const { rows } = await this.db.query<ExecutionRow>(
      `SELECT * FROM tool_executions WHERE ${where.join(' AND ')}
       ORDER BY attempt_started_at, idempotency_key LIMIT $${params.length}`,
      params,
    );
    return rows.map(toRecord);
  }
}
