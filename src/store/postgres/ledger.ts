import type pg from 'pg';
import { prepared } from './prepared.js';
import {
  RESERVABLE_STATUSES,
  settles,
  type Actor,
  type LedgerEvent,
  type ToolExecutionRecord,
} from '../../ledger/index.js';
import {
  UNKNOWN_PREDICATE,
  assertDistinctKeys,
  encodeJson,
  assertTransitionRequest,
  ignoredDetail,
  isUnknownSet,
  lossKind,
  toEvent,
  toRecord,
  transitionColumns,
  type EventRow,
  type ExecutionRow,
} from '../rows.js';
import type {
  LedgerKey,
  LedgerStore,
  ListFilter,
  NoteRequest,
  ReserveRequest,
  ReserveResult,
  TransitionRequest,
  TransitionResult,
} from '../store.js';

/** Parameter `i` (from 1) of a fragment whose parameters start at `$at` in its statement. */
export function numbered(at: number): (i: number) => string {
  return (i) => `$${at + i - 1}`;
}

/** Anything that runs a query: the pool, or one client inside a transaction. */
export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

const [REOPENABLE] = RESERVABLE_STATUSES;

/**
 * All calls of one model response in one statement: insert each new key as `started` and leave every
 * existing record alone (the caller reads it and asks the decision table). The rows it returns are
 * the ones this caller now holds; the history event is written by the same statement. Keys are
 * inserted in sorted order so two overlapping batches cannot deadlock. These are its common table
 * expressions (req, up, ev), with parameters from `$at`; with `when`, rows are inserted only where it
 * holds (a step's reservations, only once its response is saved).
 */
export function reserveCtes(at: number, when?: string): string {
  const p = numbered(at);
  return `req AS (
  SELECT * FROM unnest(${p(1)}::text[], ${p(2)}::text[], ${p(3)}::text[], ${p(4)}::text[], ${p(5)}::text[], ${p(6)}::jsonb[],
                       ${p(7)}::text[], ${p(8)}::text[], ${p(12)}::integer[])
    AS r(idempotency_key, run_id, tool_call_id, tool_name, effect, args, args_digest, compensation_of,
         attempt_timeout_ms)
), up AS (
  INSERT INTO tool_executions AS t (tenant_id, idempotency_key, run_id, tool_call_id, tool_name, effect,
    args, args_digest, status, attempt, version, compensation_of, attempt_timeout_ms)
  SELECT ${p(9)}, idempotency_key, run_id, tool_call_id, tool_name, effect, args, args_digest, 'started', 1, 1,
    compensation_of, attempt_timeout_ms
  FROM req${when === undefined ? '' : ` WHERE ${when}`} ORDER BY idempotency_key
  ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
  RETURNING t.*
), ${reservedEvents(p(10), p(11))}`;
}

/** The history event of each record `up` inserted, by the actor in the given parameters. */
function reservedEvents(actorKind: string, actorId: string): string {
  return `ev AS (
  INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
    from_status, to_status, attempt, reason)
  SELECT tenant_id, idempotency_key, 'transition', ${actorKind}, ${actorId}, 'reserve', NULL, 'started', attempt, 'reserved'
  FROM up
)`;
}

/**
 * RESERVE, answering in the same statement with the record that stands for each key it did not
 * insert (`mine` false): a replay of a settled key is this one statement, which writes nothing (its
 * insert meets the key and does nothing). A record committed after the statement began is not seen
 * here; `answer` reads it.
 */
export const RESERVE = `WITH ${reserveCtes(1)}
SELECT true AS mine, up.* FROM up
UNION ALL
SELECT false AS mine, t.* FROM req
CROSS JOIN LATERAL (
  SELECT * FROM tool_executions WHERE tenant_id = $9 AND idempotency_key = req.idempotency_key OFFSET 0
) AS t
WHERE NOT EXISTS (SELECT 1 FROM up WHERE up.idempotency_key = req.idempotency_key)`;

/**
 * RESERVE for one call (a guarded call's): the same insert, event and answer, over the call's own
 * values instead of arrays of one, which the server plans and runs for less.
 */
const RESERVE_ONE = `
WITH up AS (
  INSERT INTO tool_executions AS t (tenant_id, idempotency_key, run_id, tool_call_id, tool_name, effect,
    args, args_digest, status, attempt, version, compensation_of, attempt_timeout_ms)
  VALUES ($9, $1, $2, $3, $4, $5, $6::jsonb, $7, 'started', 1, 1, $8, $12::integer)
  ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
  RETURNING t.*
), ${reservedEvents('$10', '$11')}
SELECT true AS mine, up.* FROM up
UNION ALL
SELECT false AS mine, t.* FROM tool_executions t
WHERE t.tenant_id = $9 AND t.idempotency_key = $1 AND NOT EXISTS (SELECT 1 FROM up)`;

/** RESERVE_ONE's parameters: RESERVE's, each the one call's value. */
function reserveOneParams(r: ReserveRequest, actor: Actor): unknown[] {
  return [
    r.idempotencyKey,
    r.runId,
    r.toolCallId,
    r.toolName,
    r.effect,
    JSON.stringify(r.args),
    r.argsDigest,
    r.compensationOf,
    r.tenantId,
    actor.kind,
    actor.id,
    r.attemptTimeoutMs,
  ];
}

/** RESERVE's parameters for new keys of one tenant (re-opens go through REOPEN). */
export function reserveParams(fresh: readonly ReserveRequest[], actor: Actor): unknown[] {
  return [
    fresh.map((r) => r.idempotencyKey),
    fresh.map((r) => r.runId),
    fresh.map((r) => r.toolCallId),
    fresh.map((r) => r.toolName),
    fresh.map((r) => r.effect),
    fresh.map((r) => JSON.stringify(r.args)),
    fresh.map((r) => r.argsDigest),
    fresh.map((r) => r.compensationOf),
    fresh[0]?.tenantId,
    actor.kind,
    actor.id,
    fresh.map((r) => r.attemptTimeoutMs),
  ];
}

/**
 * Re-opens a `failed` record the decision table said may run again: compare-and-set on the version
 * the caller saw, and only for the same tool and arguments. `attempt + 1`, the last outcome cleared.
 */
const REOPEN = `
WITH up AS (
  UPDATE tool_executions SET
    status = 'started', attempt = attempt + 1, version = version + 1,
    updated_at = oncely_now(), attempt_started_at = oncely_now(), attempt_timeout_ms = $5,
    result = NULL, result_reference = NULL, error = NULL,
    settled_at = NULL, settled_by_kind = NULL, settled_by_id = NULL
  WHERE tenant_id = $1 AND idempotency_key = $2 AND status = $3 AND version = $4
    AND args_digest = $6 AND tool_name = $7
  RETURNING *
), ev AS (
  INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
    from_status, to_status, attempt, reason)
  SELECT tenant_id, idempotency_key, 'transition', $8, $9, 'reserve', $3, 'started', attempt,
    're-reserved after failed'
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

/**
 * Several outcomes at once (a step's), each the compare-and-set of TRANSITION on its own expected
 * status and version, with its history event, in one statement. The records are locked in key order
 * first, so two batches over the same keys cannot deadlock. The rows returned are the moves that
 * applied, with the request's position (`n`); the caller handles each that did not as TRANSITION's.
 * These are its common table expressions (req, locked, u, ev), with parameters from `$at`.
 */
export function transitionsCtes(at: number): string {
  const p = numbered(at);
  return `req AS (
  SELECT ${p(1)}::text AS tenant_id, r.* FROM unnest(${p(2)}::text[], ${p(3)}::text[], ${p(4)}::boolean[], ${p(5)}::jsonb[], ${p(6)}::text[], ${p(7)}::boolean[],
                       ${p(8)}::jsonb[], ${p(9)}::boolean[], ${p(10)}::text[], ${p(11)}::text[], ${p(12)}::text[], ${p(13)}::integer[],
                       ${p(14)}::text[], ${p(15)}::text[], ${p(16)}::jsonb[]) WITH ORDINALITY
    AS r(idempotency_key, to_status, set_result, result, result_reference, set_error, error, settles,
         actor_kind, actor_id, expect_status, expect_version, via, reason, detail, n)
), locked AS (
  SELECT l.idempotency_key
  FROM (SELECT * FROM req ORDER BY idempotency_key) AS k
  CROSS JOIN LATERAL (
    SELECT t.idempotency_key FROM tool_executions t
    WHERE t.tenant_id = ${p(1)} AND t.idempotency_key = k.idempotency_key
      AND t.status = k.expect_status AND t.version = k.expect_version
    FOR UPDATE
  ) AS l
), u AS (
  UPDATE tool_executions t SET
    status = req.to_status, version = t.version + 1, updated_at = oncely_now(),
    result = CASE WHEN req.set_result THEN req.result ELSE t.result END,
    result_reference = CASE WHEN req.set_result THEN req.result_reference ELSE t.result_reference END,
    error = CASE WHEN req.set_error THEN req.error ELSE t.error END,
    settled_at = CASE WHEN req.settles THEN oncely_now() ELSE t.settled_at END,
    settled_by_kind = CASE WHEN req.settles THEN req.actor_kind ELSE t.settled_by_kind END,
    settled_by_id = CASE WHEN req.settles THEN req.actor_id ELSE t.settled_by_id END
  FROM req JOIN locked USING (idempotency_key)
  WHERE t.tenant_id = req.tenant_id AND t.idempotency_key = req.idempotency_key
    AND t.status = req.expect_status AND t.version = req.expect_version
  RETURNING t.*, req.n, req.actor_kind AS ev_actor_kind, req.actor_id AS ev_actor_id, req.via AS ev_via,
    req.expect_status AS ev_from, req.reason AS ev_reason, req.detail AS ev_detail
), ev AS (
  INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
    from_status, to_status, attempt, reason, detail)
  SELECT tenant_id, idempotency_key, 'transition', ev_actor_kind, ev_actor_id, ev_via, ev_from, status,
    attempt, ev_reason, ev_detail
  FROM u ORDER BY n
)`;
}

const TRANSITIONS = `WITH ${transitionsCtes(1)}
SELECT * FROM u`;

/** TRANSITIONS' parameters: requests of one tenant, each key once, each checked against the table. */
export function transitionsParams(requests: readonly TransitionRequest[]): unknown[] {
  assertDistinctKeys(requests);
  requests.forEach(assertTransitionRequest);
  const columns = requests.map((r) => transitionColumns(r.to, r));
  return [
    requests[0]?.tenantId,
    requests.map((r) => r.idempotencyKey),
    requests.map((r) => r.to),
    columns.map((c) => c.setResult),
    columns.map((c) => encodeJson(c.result)),
    columns.map((c) => c.resultReference),
    columns.map((c) => c.setError),
    columns.map((c) => encodeJson(c.error)),
    requests.map((r) => settles(r.to)),
    requests.map((r) => r.actor.kind),
    requests.map((r) => r.actor.id),
    requests.map((r) => r.expect.status),
    requests.map((r) => r.expect.version),
    requests.map((r) => r.via),
    requests.map((r) => r.reason),
    requests.map((r) => encodeJson(r.detail ?? null)),
  ];
}

/** Appends an event to an existing record, taking its current status and attempt. */
const EVENT_ON_CURRENT = `
INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
  from_status, to_status, attempt, reason, detail)
SELECT tenant_id, idempotency_key, $3, $4, $5, $6, status, $7, attempt, $8, $9::jsonb
FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = $2`;

/**
 * Files an outcome that lost its compare-and-set, against the record as the caller last read it
 * (version $10): a `conflict` also marks the record. Nothing is written if the record moved since.
 */
const LOSS = `
WITH cur AS (
  SELECT * FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = $2 AND version = $10
), mark AS (
  UPDATE tool_executions t SET conflict_at = COALESCE(t.conflict_at, oncely_now())
  FROM cur WHERE $3 = 'conflict' AND t.tenant_id = cur.tenant_id AND t.idempotency_key = cur.idempotency_key
  RETURNING t.idempotency_key
)
INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
  from_status, to_status, attempt, reason, detail)
SELECT tenant_id, idempotency_key, $3, $4, $5, $6, status, $7, $11, $8, $9::jsonb FROM cur`;

/** A lost outcome is filed against a record that may keep moving; a few re-reads settle it. */
const LOSS_TRIES = 5;

const GET = `SELECT * FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = $2`;
/** One primary-key lookup per key (not a scan of the tenant's rows, whatever a generic plan guesses). */
const GET_MANY = `SELECT t.* FROM unnest($2::text[]) AS k (key)
CROSS JOIN LATERAL (
  SELECT * FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = k.key OFFSET 0
) AS t`;
/** Records of keys of any tenants, one primary-key lookup each (the sweep's read of a page of runs). */
const GET_ACROSS = `SELECT t.* FROM unnest($1::text[], $2::text[]) AS k (tenant_id, key)
CROSS JOIN LATERAL (
  SELECT * FROM tool_executions WHERE tenant_id = k.tenant_id AND idempotency_key = k.key OFFSET 0
) AS t`;
const HISTORY = `SELECT * FROM tool_execution_events WHERE tenant_id = $1 AND idempotency_key = $2 ORDER BY id`;

/** The ledger on PostgreSQL. Correctness rests on single statements and the primary key alone. */
export class PostgresLedger implements LedgerStore {
  constructor(private readonly db: Queryable) {}

  async reserve(requests: readonly ReserveRequest[], actor: Actor): Promise<ReserveResult[]> {
    const first = requests[0];
    if (first === undefined) return [];
    const fresh = requests.filter((r) => r.reopenVersion === undefined);
    const held = new Map<string, ToolExecutionRecord>();
    const stood = new Map<string, ToolExecutionRecord>();
    if (fresh.length > 0) {
      const [one] = fresh;
      const reserved = await this.db.query<ExecutionRow & { mine: boolean }>(
        ...(fresh.length === 1 && one !== undefined
          ? ([prepared('oncely_reserve_one', RESERVE_ONE), reserveOneParams(one, actor)] as const)
          : ([prepared('oncely_reserve', RESERVE), reserveParams(fresh, actor)] as const)),
      );
      for (const row of reserved.rows) (row.mine ? held : stood).set(row.idempotency_key, toRecord(row));
    }
    for (const r of requests) {
      if (r.reopenVersion === undefined) continue;
      const { rows } = await this.db.query<ExecutionRow>(REOPEN, [
        r.tenantId,
        r.idempotencyKey,
        REOPENABLE,
        r.reopenVersion,
        r.attemptTimeoutMs,
        r.argsDigest,
        r.toolName,
        actor.kind,
        actor.id,
      ]);
      if (rows[0] !== undefined) held.set(r.idempotencyKey, toRecord(rows[0]));
    }
    return this.answer(requests, held, stood);
  }

  /**
   * Each reservation's answer: the record this caller now holds (`mine`, by key), else the record
   * that stood (`stood`, read with the reservation), else the record that stands, read in one
   * statement.
   */
  async answer(
    requests: readonly ReserveRequest[],
    mine: ReadonlyMap<string, ToolExecutionRecord>,
    stood: ReadonlyMap<string, ToolExecutionRecord> = new Map(),
  ): Promise<ReserveResult[]> {
    const first = requests[0];
    const existing = new Map(stood);
    const others = requests
      .filter((r) => !mine.has(r.idempotencyKey) && !stood.has(r.idempotencyKey))
      .map((r) => r.idempotencyKey);
    if (first !== undefined && others.length > 0) {
      const rows = await this.db.query<ExecutionRow>(prepared('oncely_get_many', GET_MANY), [
        first.tenantId,
        others,
      ]);
      for (const row of rows.rows) existing.set(row.idempotency_key, toRecord(row));
    }
    return requests.map((r) => {
      const record = mine.get(r.idempotencyKey);
      if (record !== undefined) return { kind: 'reserved', record };
      const stood = existing.get(r.idempotencyKey);
      if (stood === undefined)
        throw new Error(`reserve of ${r.idempotencyKey} wrote nothing and found nothing`);
      return { kind: 'existing', record: stood };
    });
  }

  async transition(request: TransitionRequest): Promise<TransitionResult> {
    assertTransitionRequest(request);
    const columns = transitionColumns(request.to, request);
    const updated = await this.db.query<ExecutionRow>(prepared('oncely_transition', TRANSITION), [
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
    return this.missed(request);
  }

  async transitions(requests: readonly TransitionRequest[]): Promise<TransitionResult[]> {
    const first = requests[0];
    if (first === undefined) return [];
    if (requests.length === 1 || requests.some((r) => r.tenantId !== first.tenantId)) {
      const results: TransitionResult[] = [];
      for (const r of requests) results.push(await this.transition(r));
      return results;
    }
    const updated = await this.db.query<ExecutionRow & { n: string }>(
      prepared('oncely_transitions', TRANSITIONS),
      transitionsParams(requests),
    );
    return this.resultsOf(requests, updated.rows);
  }

  /**
   * The results of a batch of transitions from the rows that applied (each with its request's
   * position \`n\`); each that did not is answered as \`transition\` answers a lost move.
   */
  async resultsOf(
    requests: readonly TransitionRequest[],
    rows: readonly (ExecutionRow & { n: string | null })[],
  ): Promise<TransitionResult[]> {
    const applied = new Map<number, ToolExecutionRecord>();
    for (const row of rows) if (row.n !== null) applied.set(Number(row.n) - 1, toRecord(row));
    const results: TransitionResult[] = [];
    for (const [i, r] of requests.entries()) {
      const record = applied.get(i);
      results.push(record === undefined ? await this.missed(r) : { applied: true, record });
    }
    return results;
  }

  /** A move whose compare-and-set lost: the record as it stands, and the loss filed if asked. */
  private async missed(request: TransitionRequest): Promise<TransitionResult> {
    const current = await this.get(request.tenantId, request.idempotencyKey);
    if (!request.recordIgnored || current === undefined) return { applied: false, record: current };
    return this.fileLoss(request, current);
  }

  /** Files a lost outcome as `ignored` or `conflict`, decided against the record as read. */
  private async fileLoss(request: TransitionRequest, seen: ToolExecutionRecord): Promise<TransitionResult> {
    let current: ToolExecutionRecord | undefined = seen;
    for (let i = 0; i < LOSS_TRIES && current !== undefined; i++) {
      const kind = lossKind(request, current);
      const filed = await this.db.query(LOSS, [
        request.tenantId,
        request.idempotencyKey,
        kind,
        request.actor.kind,
        request.actor.id,
        request.via,
        request.to,
        request.reason,
        encodeJson(ignoredDetail(request, true)),
        current.version,
        request.attempt ?? current.attempt,
      ]);
      // Filed against the version read: an ignored outcome left that record as it was; a conflict
      // marked it, so it is read again.
      if (filed.rowCount === 1 && kind === 'ignored') return { applied: false, record: current };
      const after = await this.get(request.tenantId, request.idempotencyKey);
      if (filed.rowCount === 1) return { applied: false, record: after, conflict: true };
      current = after;
    }
    return { applied: false, record: current };
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

  async getMany(keys: readonly LedgerKey[]): Promise<ToolExecutionRecord[]> {
    if (keys.length === 0) return [];
    const { rows } = await this.db.query<ExecutionRow>(GET_ACROSS, [
      keys.map((k) => k.tenantId),
      keys.map((k) => k.idempotencyKey),
    ]);
    return rows.map(toRecord);
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
    if (filter.conflict === true) where.push('conflict_at IS NOT NULL');
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
