import { RESERVABLE_STATUSES, settles, type Actor, type RepeatScope } from '../ledger/index.js';
import {
  UNKNOWN_PREDICATE,
  assertDistinctKeys,
  assertTransitionRequest,
  encodeJson,
  isUnknownSet,
  transitionColumns,
} from './rows.js';
import type { ListFilter, ReserveRequest, TransitionRequest } from './ledger-store.js';

/*
 * The ledger's SQL, both dialects side by side: each operation's PostgreSQL statement (one statement
 * of common table expressions, `$n` parameters) next to its SQLite statement (run per call inside one
 * transaction, `@name` or `?` parameters), so a change to one is made beside the other. Where one
 * dialect needs a statement the other does without (PostgreSQL's batch and single-call forms, SQLite's
 * separate conflict mark and event insert), it says what the other does instead. The conformance
 * suite and test/store/drift.test.ts judge that the two stores behave alike.
 */

/** Parameter `i` (from 1) of a PostgreSQL fragment whose parameters start at `$at` in its statement. */
export function numbered(at: number): (i: number) => string {
  return (i) => `$${at + i - 1}`;
}

export const [REOPENABLE] = RESERVABLE_STATUSES;

/**
 * The statement's one instant: oncely_now() reads the clock each time it is called, so columns that
 * must be equal (a new record's created_at, updated_at and attempt_started_at) take it from here
 * (a volatile CTE is computed once) instead of each calling it, which across a millisecond's edge
 * gave them different values.
 */
const CLOCK = 'clock AS (SELECT oncely_now() AS at)';

/** An earlier call of a repeat took effect or may have: all but a `failed` one with no conflict. */
const TOOK_EFFECT_OR_MAY = "NOT (status = 'failed' AND conflict_at IS NULL)";

/**
 * All calls of one model response in one statement: insert each new key as `started` and leave every
 * existing record alone (the caller reads it and asks the decision table). The rows it returns are
 * the ones this caller now holds; the history event is written by the same statement. Keys are
 * inserted in sorted order so two overlapping batches cannot deadlock. These are its common table
 * expressions (req, up, ev), with parameters from `$at`; with `when`, rows are inserted only where it
 * holds (a step's reservations, only once its response is saved).
 */
/** How many parameters reserveCtes takes (reserveParams' length). */
export const RESERVE_PARAMS = 14;

export function reserveCtes(at: number, when?: string): string {
  const p = numbered(at);
  return `${CLOCK}, req AS (
  SELECT * FROM unnest(${p(1)}::text[], ${p(2)}::text[], ${p(3)}::text[], ${p(4)}::text[], ${p(5)}::text[], ${p(6)}::jsonb[],
                       ${p(7)}::text[], ${p(8)}::text[], ${p(12)}::integer[], ${p(13)}::text[], ${p(14)}::text[])
    AS r(idempotency_key, run_id, tool_call_id, tool_name, effect, args, args_digest, compensation_of,
         attempt_timeout_ms, repeat_digest, conversation_id)
), up AS (
  INSERT INTO tool_executions AS t (tenant_id, idempotency_key, run_id, tool_call_id, tool_name, effect,
    args, args_digest, status, attempt, version, compensation_of, attempt_timeout_ms, created_at, updated_at,
    attempt_started_at, repeat_digest, conversation_id)
  SELECT ${p(9)}, idempotency_key, run_id, tool_call_id, tool_name, effect, args, args_digest, 'started', 1, 1,
    compensation_of, attempt_timeout_ms, (SELECT at FROM clock), (SELECT at FROM clock), (SELECT at FROM clock),
    repeat_digest, conversation_id
  FROM req${when === undefined ? '' : ` WHERE ${when}`} ORDER BY idempotency_key
  ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
  RETURNING t.*
), ${reservedEvents(p(10), p(11))}`;
}

/** The history event of each record `up` inserted, by the actor in the given parameters. */
export function reservedEvents(actorKind: string, actorId: string): string {
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
export const RESERVE = {
  postgres: `WITH ${reserveCtes(1)}
SELECT true AS mine, up.* FROM up
UNION ALL
SELECT false AS mine, t.* FROM req
CROSS JOIN LATERAL (
  SELECT * FROM tool_executions WHERE tenant_id = $9 AND idempotency_key = req.idempotency_key OFFSET 0
) AS t
WHERE NOT EXISTS (SELECT 1 FROM up WHERE up.idempotency_key = req.idempotency_key)`,
  /** SQLite: one call at a time, in one transaction (re-opens with REOPEN). */
  sqlite: `
INSERT INTO tool_executions (tenant_id, idempotency_key, run_id, tool_call_id, tool_name, effect, args,
  args_digest, status, attempt, version, compensation_of, attempt_timeout_ms, created_at, updated_at,
  attempt_started_at, repeat_digest, conversation_id)
VALUES (@tenantId, @idempotencyKey, @runId, @toolCallId, @toolName, @effect, @args,
  @argsDigest, 'started', 1, 1, @compensationOf, @attemptTimeoutMs, @now, @now, @now, @repeatDigest,
  @conversationId)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING *`,
} as const;

/**
 * RESERVE for one call (a guarded call's): the same insert, event and answer, over the call's own
 * values instead of arrays of one, which the server plans and runs for less. With `repeatScope` (a
 * condition on `$15`), the call's repeat check in the same statement (`reserveUnlessRepeat`): the
 * record is inserted only where no other call of its scope with its repeat digest took effect or
 * may have (REPEATS' rule; one descent of the repeats index). No row back then: an earlier call
 * stands and this key has none (or a record of this key committed after the statement began; the
 * caller's careful path reads both again).
 */
function reserveOne(repeatScope?: string): string {
  const values = `$9, $1, $2, $3, $4, $5, $6::jsonb, $7, 'started', 1, 1, $8, $12::integer,
    (SELECT at FROM clock), (SELECT at FROM clock), (SELECT at FROM clock), $13, $14`;
  return `
WITH ${CLOCK}, ${
    repeatScope === undefined
      ? ''
      : `earlier AS (
  SELECT 1 FROM tool_executions
  WHERE tenant_id = $9 AND repeat_digest = $13 AND ${repeatScope} AND idempotency_key <> $1
    AND ${TOOK_EFFECT_OR_MAY}
  LIMIT 1
), `
  }up AS (
  INSERT INTO tool_executions AS t (tenant_id, idempotency_key, run_id, tool_call_id, tool_name, effect,
    args, args_digest, status, attempt, version, compensation_of, attempt_timeout_ms, created_at, updated_at,
    attempt_started_at, repeat_digest, conversation_id)
  ${
    repeatScope === undefined
      ? `VALUES (${values})`
      : `SELECT ${values}
  WHERE NOT EXISTS (SELECT 1 FROM earlier)`
  }
  ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
  RETURNING t.*
), ${reservedEvents('$10', '$11')}
SELECT true AS mine, up.* FROM up
UNION ALL
SELECT false AS mine, t.* FROM tool_executions t
WHERE t.tenant_id = $9 AND t.idempotency_key = $1 AND NOT EXISTS (SELECT 1 FROM up)`;
}

export const RESERVE_ONE = { postgres: reserveOne() } as const;

export const RESERVE_ONE_UNLESS_REPEAT = {
  postgres: {
    run: reserveOne('run_id = $15'),
    conversation: reserveOne('conversation_id = $15'),
  },
} as const;

/** RESERVE_ONE's parameters: RESERVE's, each the one call's value. */
export function reserveOneParams(r: ReserveRequest, actor: Actor): unknown[] {
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
    r.repeatDigest ?? null,
    r.conversationId ?? null,
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
    fresh.map((r) => r.repeatDigest ?? null),
    fresh.map((r) => r.conversationId ?? null),
  ];
}

/**
 * Re-opens a `failed` record the decision table said may run again: compare-and-set on the version
 * the caller saw, and only for the same tool and arguments. `attempt + 1`, the last outcome cleared.
 */
export const REOPEN = {
  postgres: `
WITH ${CLOCK}, up AS (
  UPDATE tool_executions SET
    status = 'started', attempt = attempt + 1, version = version + 1,
    updated_at = (SELECT at FROM clock), attempt_started_at = (SELECT at FROM clock), attempt_timeout_ms = $5,
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
SELECT * FROM up`,
  sqlite: `
UPDATE tool_executions SET
  status = 'started', attempt = attempt + 1, version = version + 1,
  updated_at = @now, attempt_started_at = @now, attempt_timeout_ms = @attemptTimeoutMs,
  result = NULL, result_reference = NULL, error = NULL,
  settled_at = NULL, settled_by_kind = NULL, settled_by_id = NULL
WHERE tenant_id = @tenantId AND idempotency_key = @idempotencyKey AND status = @reopenable
  AND version = @reopenVersion AND args_digest = @argsDigest AND tool_name = @toolName
RETURNING *`,
} as const;

export const TRANSITION = {
  postgres: `
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
SELECT * FROM u`,
  sqlite: `
UPDATE tool_executions SET
  status = @to, version = version + 1, updated_at = @now,
  result = CASE WHEN @setResult THEN @result ELSE result END,
  result_reference = CASE WHEN @setResult THEN @resultReference ELSE result_reference END,
  error = CASE WHEN @setError THEN @error ELSE error END,
  settled_at = CASE WHEN @settles THEN @now ELSE settled_at END,
  settled_by_kind = CASE WHEN @settles THEN @actorKind ELSE settled_by_kind END,
  settled_by_id = CASE WHEN @settles THEN @actorId ELSE settled_by_id END
WHERE tenant_id = @tenantId AND idempotency_key = @idempotencyKey
  AND status = @expectStatus AND version = @expectVersion
RETURNING *`,
} as const;

export const MARK_CONFLICT = {
  sqlite: `
UPDATE tool_executions SET conflict_at = COALESCE(conflict_at, @now)
WHERE tenant_id = @tenantId AND idempotency_key = @idempotencyKey`,
} as const;

/**
 * Several outcomes at once (a step's), each the compare-and-set of TRANSITION on its own expected
 * status and version, with its history event, in one statement. The records are locked in key order
 * first, so two batches over the same keys cannot deadlock. The rows returned are the moves that
 * applied, with the request's position (`n`); the caller handles each that did not as TRANSITION's.
 * These are its common table expressions (req, locked, u, ev), with parameters from `$at`.
 */
/** How many parameters transitionsCtes takes (transitionsParams' length). */
export const TRANSITIONS_PARAMS = 16;

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

/** SQLite: TRANSITION once a request, in one transaction. */
export const TRANSITIONS = {
  postgres: `WITH ${transitionsCtes(1)}
SELECT * FROM u`,
} as const;

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

/** TRANSITION's parameters: one outcome's, in the order of its `$n`. */
export function transitionParams(request: TransitionRequest): unknown[] {
  const columns = transitionColumns(request.to, request);
  return [
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
  ];
}

/** Appends an event to an existing record, taking its current status and attempt. */
export const EVENT_ON_CURRENT = {
  postgres: `
INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
  from_status, to_status, attempt, reason, detail)
SELECT tenant_id, idempotency_key, $3, $4, $5, $6, status, $7, attempt, $8, $9::jsonb
FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = $2`,
} as const;

export const INSERT_EVENT = {
  sqlite: `
INSERT INTO tool_execution_events (tenant_id, idempotency_key, at, kind, actor_kind, actor_id, via,
  from_status, to_status, attempt, reason, detail)
VALUES (@tenantId, @idempotencyKey, @now, @kind, @actorKind, @actorId, @via,
  @from, @to, @attempt, @reason, @detail)`,
} as const;

/**
 * Files an outcome that lost its compare-and-set, against the record as the caller last read it
 * (version $10): a `conflict` also marks the record. Nothing is written if the record moved since.
 */
export const LOSS = {
  postgres: `
WITH cur AS (
  SELECT * FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = $2 AND version = $10
), mark AS (
  UPDATE tool_executions t SET conflict_at = COALESCE(t.conflict_at, oncely_now())
  FROM cur WHERE $3 = 'conflict' AND t.tenant_id = cur.tenant_id AND t.idempotency_key = cur.idempotency_key
  RETURNING t.idempotency_key
)
INSERT INTO tool_execution_events (tenant_id, idempotency_key, kind, actor_kind, actor_id, via,
  from_status, to_status, attempt, reason, detail)
SELECT tenant_id, idempotency_key, $3, $4, $5, $6, status, $7, $11, $8, $9::jsonb FROM cur`,
} as const;

/** A lost outcome is filed against a record that may keep moving; a few re-reads settle it. */
export const LOSS_TRIES = 5;

export const GET = {
  postgres: `SELECT * FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = $2`,
  sqlite: `SELECT * FROM tool_executions WHERE tenant_id = ? AND idempotency_key = ?`,
} as const;

/** One primary-key lookup per key (not a scan of the tenant's rows, whatever a generic plan guesses). */
export const GET_MANY = {
  postgres: `SELECT t.* FROM unnest($2::text[]) AS k (key)
CROSS JOIN LATERAL (
  SELECT * FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = k.key OFFSET 0
) AS t`,
} as const;
/** Records of keys of any tenants, one primary-key lookup each (the sweep's read of a page of runs). */
export const GET_ACROSS = {
  postgres: `SELECT t.* FROM unnest($1::text[], $2::text[]) AS k (tenant_id, key)
CROSS JOIN LATERAL (
  SELECT * FROM tool_executions WHERE tenant_id = k.tenant_id AND idempotency_key = k.key OFFSET 0
) AS t`,
} as const;
export const HISTORY = {
  postgres: `SELECT * FROM tool_execution_events WHERE tenant_id = $1 AND idempotency_key = $2 ORDER BY id`,
  sqlite: `SELECT * FROM tool_execution_events WHERE tenant_id = ? AND idempotency_key = ? ORDER BY id`,
} as const;

/** A page of a tenant's records in (attempt_started_at, key) order, filtered. */
export const LIST = {
  postgres(tenantId: string, filter: ListFilter): { text: string; values: unknown[] } {
    const values: unknown[] = [tenantId];
    const where = ['tenant_id = $1'];
    const add = (sql: (n: string) => string, value: unknown): void => {
      values.push(value);
      where.push(sql(`$${values.length}`));
    };
    if (filter.statuses !== undefined && isUnknownSet(filter.statuses)) where.push(UNKNOWN_PREDICATE);
    else if (filter.statuses !== undefined) add((n) => `status = ANY(${n}::text[])`, filter.statuses);
    if (filter.runId !== undefined) add((n) => `run_id = ${n}`, filter.runId);
    if (filter.toolName !== undefined) add((n) => `tool_name = ${n}`, filter.toolName);
    if (filter.conflict === true) where.push('conflict_at IS NOT NULL');
    if (filter.after !== undefined) {
      values.push(filter.after.at, filter.after.key);
      where.push(
        `(attempt_started_at, idempotency_key) > ($${values.length - 1}::timestamptz, $${values.length})`,
      );
    }
    values.push(filter.limit);
    return {
      text: `SELECT * FROM tool_executions WHERE ${where.join(' AND ')}
       ORDER BY attempt_started_at, idempotency_key LIMIT $${values.length}`,
      values,
    };
  },
  sqlite(tenantId: string, filter: ListFilter): { text: string; params: Record<string, unknown> } {
    const where = ['tenant_id = @tenantId'];
    const params: Record<string, unknown> = { tenantId, limit: filter.limit };
    if (filter.statuses !== undefined && isUnknownSet(filter.statuses)) {
      where.push(UNKNOWN_PREDICATE);
    } else if (filter.statuses !== undefined) {
      where.push(`status IN (${filter.statuses.map((_, i) => `@status${i}`).join(', ') || 'NULL'})`);
      filter.statuses.forEach((s, i) => (params[`status${i}`] = s));
    }
    if (filter.runId !== undefined) {
      where.push('run_id = @runId');
      params.runId = filter.runId;
    }
    if (filter.toolName !== undefined) {
      where.push('tool_name = @toolName');
      params.toolName = filter.toolName;
    }
    if (filter.conflict === true) where.push('conflict_at IS NOT NULL');
    if (filter.after !== undefined) {
      where.push('(attempt_started_at, idempotency_key) > (@afterAt, @afterKey)');
      params.afterAt = filter.after.at;
      params.afterKey = filter.after.key;
    }
    return {
      text: `SELECT * FROM tool_executions WHERE ${where.join(' AND ')}
      ORDER BY attempt_started_at, idempotency_key LIMIT @limit`,
      params,
    };
  },
};

/** At most this many earlier calls are read per lookup, the newest (one is enough to decide). */
const REPEATS_LIMIT = 200;

function repeatsPerDigest(scope: string): string {
  return `SELECT t.* FROM unnest($2::text[]) AS d (digest)
CROSS JOIN LATERAL (
  SELECT * FROM tool_executions
  WHERE tenant_id = $1 AND repeat_digest = d.digest AND ${scope}
    AND ${TOOK_EFFECT_OR_MAY}
  ORDER BY created_at DESC LIMIT ${REPEATS_LIMIT} OFFSET 0
) AS t`;
}

/**
 * REPEATS: the earlier calls with one of these digests in a scope (a run, a conversation, or the
 * tenant since a time) that took effect or may have (a `failed` one without a conflict did not),
 * newest first, served by `tool_executions_repeats`. A scope's column is the
 * third parameter: the run id, the conversation id, or the earliest creation time.
 */
export const REPEATS = {
  // One index descent per digest (LATERAL): planned without the values, the only cheap plan is the
  // repeats index, never a walk of the run's or the tenant's rows (see prepared.ts).
  postgres: {
    run: repeatsPerDigest('run_id = $3'),
    conversation: repeatsPerDigest('conversation_id = $3'),
    tenant: repeatsPerDigest('created_at >= $3::timestamptz'),
  },
  sqlite: {
    run: `SELECT * FROM tool_executions
WHERE tenant_id = ? AND repeat_digest IN (SELECT value FROM json_each(?)) AND run_id = ?
AND repeat_digest IS NOT NULL AND NOT (status = 'failed' AND conflict_at IS NULL)
ORDER BY created_at DESC LIMIT ${REPEATS_LIMIT}`,
    conversation: `SELECT * FROM tool_executions
WHERE tenant_id = ? AND repeat_digest IN (SELECT value FROM json_each(?)) AND conversation_id = ?
AND repeat_digest IS NOT NULL AND NOT (status = 'failed' AND conflict_at IS NULL)
ORDER BY created_at DESC LIMIT ${REPEATS_LIMIT}`,
    tenant: `SELECT * FROM tool_executions
WHERE tenant_id = ? AND repeat_digest IN (SELECT value FROM json_each(?)) AND created_at >= ?
AND repeat_digest IS NOT NULL AND NOT (status = 'failed' AND conflict_at IS NULL)
ORDER BY created_at DESC LIMIT ${REPEATS_LIMIT}`,
  },
} as const;

/** REPEATS' third parameter for a scope. */
export function repeatScopeParam(scope: RepeatScope, toIso: (ms: number) => string): string {
  switch (scope.kind) {
    case 'run':
      return scope.runId;
    case 'conversation':
      return scope.conversationId;
    case 'tenant':
      return toIso(scope.sinceMs);
  }
}

/** GUARD_REPEATS: an advisory transaction lock per repeat digest of a tenant, in sorted order. */
export const GUARD_REPEATS = {
  postgres: `SELECT pg_advisory_xact_lock(hashtextextended($1 || ' ' || d, 0))
FROM (SELECT DISTINCT d FROM unnest($2::text[]) AS d ORDER BY d) AS digests`,
} as const;
