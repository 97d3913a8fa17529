import type { SaveCheckpointRequest, ApprovalListFilter, RunListFilter } from './run-store.js';
import type { RunUsage } from '../run-state/index.js';
import { appendedMessages, releasesLease, RUN_COLUMNS } from './run-rows.js';
import { encodeJson } from './rows.js';
import { eventDataSql, STORE_RUN_EVENTS, type RunEventDefinition } from './run-events.js';
import { numbered } from './ledger-sql.js';
import type { StoreDialect } from './store.js';

/*
 * The SQL of the run store's operations, both dialects side by side: each operation's PostgreSQL
 * statement (one statement of common table expressions, `$n` parameters) next to its SQLite
 * statements (those of one transaction, `?` or `@name` parameters), so a change to one is made
 * beside the other. The events a store writes itself are defined once (run-events.ts) and rendered
 * into both. Where the two differ only in dialect, an operation is one definition rendered for each
 * (`Words`: SEND_MESSAGE, the events a change writes); where SQLite keeps several statements for
 * PostgreSQL's one, they follow its common table expressions in order. The conformance suite and
 * test/store/drift.test.ts judge that the two stores behave alike; PostgresRuns and SqliteRuns hold
 * only what runs the statements.
 */

/**
 * When a run became claimable: a queued run when it was queued (or the time it was let go until), a
 * running one when its lease expired. The claim index (runs_claim, schema 0006) is on this, among
 * queued and running runs, so the oldest claimable run is the first entry of an index scan.
 */
const CLAIMABLE_FROM = 'COALESCE(lease_expires_at, updated_at)';

/**
 * What an operation defined once for both dialects says differently in each: its parameters (by
 * name: PostgreSQL's numbered and cast, SQLite's named), the time now, and where the parts after the
 * run's change read the run as it now stands, as `u`. On PostgreSQL that is the change's returned row
 * (the common table expression `u`, empty when nothing changed); on SQLite, the run's row by its key:
 * the change is the statement before, in the same transaction, and the parts run only when it
 * changed the run (the one check the SQLite store makes between them).
 */
interface Words {
  readonly dialect: StoreDialect;
  readonly p: Readonly<Record<string, string>>;
  readonly now: string;
  /** `FROM` the changed run, as `u`, where `when` (over `u`) holds. */
  changed(when?: string): string;
}

/** PostgreSQL's words: each parameter as given (`$n`, cast where the statement needs it). */
function pgWords(p: Readonly<Record<string, string>>): Words {
  return {
    dialect: 'postgres',
    p,
    now: 'oncely_now()',
    changed: (when) => `FROM u${when === undefined ? '' : ` WHERE ${when}`}`,
  };
}

/** SQLite's words: each parameter `@name`, now `@at`, the run by `@tenantId` and `@runId`. */
function liteWords(...names: readonly string[]): Words {
  const p = Object.fromEntries(['tenantId', 'runId', ...names].map((n) => [n, `@${n}`]));
  return {
    dialect: 'sqlite',
    p,
    now: '@at',
    changed: (when) =>
      `FROM runs u WHERE u.tenant_id = @tenantId AND u.run_id = @runId${when === undefined ? '' : ` AND ${when}`}`,
  };
}

/** An event the store writes itself with a change of a run: its seq and the rest over `u`. */
interface StoreEvent {
  readonly event: RunEventDefinition;
  /** Its seq, over the changed run `u` (whose event_seq the change moved on past it). */
  readonly seq: string;
  /** Written only where this holds, over `u`. */
  readonly when?: string;
}

/**
 * The insert of the events a change of a run writes (run-events.ts defines their data), in one
 * dialect: PostgreSQL's common table expression `ev`, SQLite's statement after the change.
 */
function storeEvents(w: Words, events: readonly StoreEvent[]): string {
  return `INSERT INTO run_events (tenant_id, run_id, seq, at, type, data)
${events
  .map(
    (e) =>
      `SELECT u.tenant_id, u.run_id, ${e.seq}, ${w.now}, '${e.event.type}', ${eventDataSql(w.dialect, e.event, 'u', w.p)}
  ${w.changed(e.when)}`,
  )
  .join('\nUNION ALL\n')}`;
}

/** The one event of a change that moved the run's event_seq on by one. */
const oneEvent = (w: Words, event: RunEventDefinition): string =>
  storeEvents(w, [{ event, seq: 'u.event_seq' }]);

/** A run that may be claimed now, `now` being the dialect's time of the claim. */
const claimable = (now: string): string => `status IN ('queued', 'running') AND ${CLAIMABLE_FROM} <= ${now}`;

/** What a claim sets (PostgreSQL: the owner $1, the lease $2 ms; the event's seq moves with it). */
const PG_CLAIM_SET = `status = 'running', lease_owner = $1, lease_epoch = lease_epoch + 1,
  lease_expires_at = oncely_now() + make_interval(secs => $2::double precision / 1000), updated_at = oncely_now(),
  drive_attempts = drive_attempts + 1, event_seq = event_seq + 1`;

/** What a claim sets (SQLite: @owner, @expires, @at; the event's seq moves with it). */
const LITE_CLAIM_SET = `status = 'running', lease_owner = @owner, lease_epoch = lease_epoch + 1,
  lease_expires_at = @expires, updated_at = @at, drive_attempts = drive_attempts + 1, event_seq = event_seq + 1`;

/**
 * The conversation of the run `alias` names, its messages in order as one JSON array: a range of
 * run_messages' primary key.
 */
export function messagesOf(alias: string): string {
  return `(SELECT COALESCE(json_agg(m.message ORDER BY m.idx), '[]'::json) FROM run_messages m
    WHERE m.tenant_id = ${alias}.tenant_id AND m.run_id = ${alias}.run_id) AS messages`;
}

/** PostgreSQL: a claim's event, and the claimed run with its conversation. */
const PG_CLAIMED_EVENT = `
, ev AS (
  ${oneEvent(pgWords({}), STORE_RUN_EVENTS.claimed)}
)
SELECT u.*, ${messagesOf('u')} FROM u`;

/** SQLite: a claim's event, after the claim (CLAIM.sqlite.run, CLAIM_NEXT.sqlite.run) changed the run. */
const LITE_CLAIMED_EVENT = oneEvent(liteWords(), STORE_RUN_EVENTS.claimed);

export const CLAIM_NEXT = {
  postgres: `
WITH u AS (
  UPDATE runs SET ${PG_CLAIM_SET}
  WHERE (tenant_id, run_id) = (
    SELECT tenant_id, run_id FROM runs WHERE ${claimable('oncely_now()')} AND ($3::text[] IS NULL OR agent = ANY($3::text[]))
    ORDER BY ${CLAIMABLE_FROM} LIMIT 1 FOR UPDATE SKIP LOCKED
  ) AND ${claimable('oncely_now()')}
  RETURNING *
)${PG_CLAIMED_EVENT}`,
  sqlite: {
    run: `UPDATE runs SET ${LITE_CLAIM_SET} WHERE rowid = (
  SELECT rowid FROM runs WHERE ${claimable('@at')}
    AND (@agents IS NULL OR agent IN (SELECT value FROM json_each(@agents)))
  ORDER BY ${CLAIMABLE_FROM} LIMIT 1) RETURNING ${RUN_COLUMNS}`,
    event: LITE_CLAIMED_EVENT,
  },
} as const;

export const CLAIM = {
  postgres: `
WITH u AS (
  UPDATE runs SET ${PG_CLAIM_SET} WHERE tenant_id = $3 AND run_id = $4 AND ${claimable('oncely_now()')}
    AND ($5::text[] IS NULL OR agent = ANY($5::text[]))
  RETURNING *
)${PG_CLAIMED_EVENT}`,
  sqlite: {
    run: `UPDATE runs SET ${LITE_CLAIM_SET} WHERE tenant_id = @tenantId AND run_id = @runId AND ${claimable('@at')}
  AND (@agents IS NULL OR agent IN (SELECT value FROM json_each(@agents))) RETURNING ${RUN_COLUMNS}`,
    event: LITE_CLAIMED_EVENT,
  },
} as const;

export const GET = {
  postgres: `SELECT r.*, ${messagesOf('r')} FROM runs r WHERE tenant_id = $1 AND run_id = $2`,
  /** The run's row as SUMMARY reads it, then its messages, in one read transaction. */
  sqlite: {
    messages: 'SELECT message FROM run_messages WHERE tenant_id = ? AND run_id = ? ORDER BY idx',
  },
} as const;

export const SUMMARY = {
  postgres: `SELECT ${RUN_COLUMNS} FROM runs WHERE tenant_id = $1 AND run_id = $2`,
  sqlite: `SELECT ${RUN_COLUMNS} FROM runs WHERE tenant_id = ? AND run_id = ?`,
} as const;

export const RENEW = {
  postgres: `
UPDATE runs SET lease_expires_at = oncely_now() + make_interval(secs => $5::double precision / 1000)
WHERE tenant_id = $1 AND run_id = $2 AND lease_epoch = $3 AND lease_owner = $4 AND status = 'running'
  AND lease_expires_at > oncely_now()`,
  sqlite: `UPDATE runs SET lease_expires_at = ? WHERE tenant_id = ? AND run_id = ? AND lease_epoch = ?
  AND lease_owner = ? AND status = 'running' AND lease_expires_at > ?`,
} as const;

/** The run's usage columns, in the order of `usageVector`. */
export const USAGE_COLUMNS = [
  'input_tokens',
  'output_tokens',
  'reasoning_tokens',
  'cached_input_tokens',
  'total_tokens',
] as const;

/** How many parameters SAVE's common table expressions take (`saveParams`). */
export const SAVE_PARAMS = 19;

/**
 * A checkpoint saved under the fence (epoch, version and message count), with its new messages
 * appended and its events, and the lease renewed when asked: SAVE's common table expressions (saved,
 * saved_msg, saved_ev), with parameters from `$at`; `also` adds a condition to the fence (a step's
 * outcomes all applied).
 */
export function saveCtes(at: number, also = ''): string {
  const p = numbered(at);
  return `saved AS (
  UPDATE runs SET pending = ${p(5)}::jsonb, step = ${p(16)}::integer,
    message_count = message_count + cardinality(${p(17)}::jsonb[]),
    checkpoint_version = checkpoint_version + 1, status = ${p(6)},
    result = COALESCE(${p(7)}::jsonb, result), error = ${p(8)}::jsonb, status_reason = ${p(9)}, updated_at = oncely_now(),
    lease_owner = CASE WHEN ${p(10)} THEN NULL ELSE lease_owner END,
    lease_expires_at = CASE WHEN ${p(10)} THEN NULL
      WHEN ${p(14)}::text IS NOT NULL THEN oncely_now() + make_interval(secs => ${p(15)}::double precision / 1000)
      ELSE lease_expires_at END,
    drive_attempts = CASE WHEN ${p(10)} THEN 0 ELSE drive_attempts END,
    model_outages = CASE WHEN ${p(13)} THEN 0 ELSE model_outages END,
    event_seq = event_seq + cardinality(${p(11)}::text[]),
    ${USAGE_COLUMNS.map((c, i) => `${c} = ${c} + COALESCE((${p(19)}::bigint[])[${i + 1}], 0)`).join(', ')},
    last_input_tokens = COALESCE((${p(19)}::bigint[])[1], last_input_tokens)
  WHERE tenant_id = ${p(1)} AND run_id = ${p(2)} AND lease_epoch = ${p(3)} AND checkpoint_version = ${p(4)} AND status = 'running'
    AND message_count = ${p(18)}::integer
    AND (${p(14)}::text IS NULL OR (lease_owner = ${p(14)} AND lease_expires_at > oncely_now()))${also}
  RETURNING tenant_id, run_id, checkpoint_version, event_seq
), saved_msg AS (
  INSERT INTO run_messages (tenant_id, run_id, idx, message)
  SELECT saved.tenant_id, saved.run_id, ${p(18)}::integer + m.n - 1, m.message
  FROM saved, unnest(${p(17)}::jsonb[]) WITH ORDINALITY AS m(message, n)
), saved_ev AS (
  INSERT INTO run_events (tenant_id, run_id, seq, type, data)
  SELECT saved.tenant_id, saved.run_id, saved.event_seq - cardinality(${p(11)}::text[]) + e.n, e.type, e.data
  FROM saved, unnest(${p(11)}::text[], ${p(12)}::jsonb[]) WITH ORDINALITY AS e(type, data, n)
  ORDER BY e.n
)`;
}

export const SAVE = {
  postgres: `WITH ${saveCtes(1)}
SELECT checkpoint_version FROM saved`,
  /**
   * saveCtes' parts one to one: the run saved under the same fence and renewal (saved), then, when it
   * was, its messages (saved_msg: `message`, one a row) and its events (saved_ev: APPEND_EVENT.sqlite.event,
   * one a row, numbered back from the event_seq it returns).
   */
  sqlite: {
    run: `UPDATE runs SET pending = @pending, step = @step, message_count = message_count + @appended,
  checkpoint_version = checkpoint_version + 1, status = @status,
  result = COALESCE(@result, result), error = @error, status_reason = @reason, updated_at = @at,
  lease_owner = CASE WHEN @release THEN NULL ELSE lease_owner END,
  lease_expires_at = CASE WHEN @release THEN NULL WHEN @renewOwner IS NOT NULL THEN @renewExpires
    ELSE lease_expires_at END,
  drive_attempts = CASE WHEN @release THEN 0 ELSE drive_attempts END,
  model_outages = CASE WHEN @modelAnswered THEN 0 ELSE model_outages END,
  event_seq = event_seq + @events,
  input_tokens = input_tokens + @inputTokens, output_tokens = output_tokens + @outputTokens,
  reasoning_tokens = reasoning_tokens + @reasoningTokens, cached_input_tokens = cached_input_tokens + @cachedInputTokens,
  total_tokens = total_tokens + @totalTokens,
  last_input_tokens = CASE WHEN @counted THEN @inputTokens ELSE last_input_tokens END
WHERE tenant_id = @tenantId AND run_id = @runId AND lease_epoch = @epoch
  AND checkpoint_version = @version AND status = 'running' AND message_count = @stored
  AND (@renewOwner IS NULL OR (lease_owner = @renewOwner AND lease_expires_at > @at))
RETURNING checkpoint_version, event_seq`,
    message: 'INSERT INTO run_messages (tenant_id, run_id, idx, message) VALUES (?, ?, ?, ?)',
  },
} as const;

/**
 * A new run, `queued`; or, with an owner ($6), already claimed by it (as CLAIM leaves a run). Its
 * first messages ($5) are appended with it.
 */
export const CREATE = {
  postgres: `
WITH u AS (
  INSERT INTO runs (tenant_id, run_id, agent, status, input, step, pending, message_count, checkpoint_version,
    event_seq, lease_owner, lease_epoch, lease_expires_at, drive_attempts, token_budget)
  SELECT $1, $2, $3, CASE WHEN $6::text IS NULL THEN 'queued' ELSE 'running' END, $4::jsonb, $8::integer,
    $9::jsonb, cardinality($5::jsonb[]), 1,
    CASE WHEN $6::text IS NULL THEN 1 ELSE 2 END, $6, CASE WHEN $6::text IS NULL THEN 0 ELSE 1 END,
    CASE WHEN $6::text IS NULL THEN NULL ELSE oncely_now() + make_interval(secs => $7::double precision / 1000) END,
    CASE WHEN $6::text IS NULL THEN 0 ELSE 1 END, $10::bigint
  ON CONFLICT (tenant_id, run_id) DO NOTHING
  RETURNING *
), msg AS (
  INSERT INTO run_messages (tenant_id, run_id, idx, message)
  SELECT u.tenant_id, u.run_id, m.n - 1, m.message FROM u, unnest($5::jsonb[]) WITH ORDINALITY AS m(message, n)
), ev AS (
  ${storeEvents(pgWords({}), [
    { event: STORE_RUN_EVENTS.created, seq: '1' },
    { event: STORE_RUN_EVENTS.claimed, seq: '2', when: 'u.lease_owner IS NOT NULL' },
  ])}
)
SELECT * FROM u`,
  /**
   * The run inserted `queued` with its created event (seq 1); its messages appended (SAVE.sqlite.message);
   * with an owner, then claimed as CLAIM.sqlite claims it (its claimed event seq 2).
   */
  sqlite: {
    run: `INSERT INTO runs (tenant_id, run_id, agent, status, input, step, pending, message_count,
  checkpoint_version, event_seq, created_at, updated_at, token_budget)
VALUES (@tenantId, @runId, @agent, 'queued', @input, @step, @pending, @messageCount, 1, 1, @at, @at, @tokenBudget)
ON CONFLICT (tenant_id, run_id) DO NOTHING RETURNING ${RUN_COLUMNS}`,
    event: storeEvents(liteWords(), [{ event: STORE_RUN_EVENTS.created, seq: '1' }]),
  },
} as const;

export const REQUEUE = {
  postgres: `
WITH u AS (
  UPDATE runs SET status = 'queued', status_reason = $4, updated_at = oncely_now(), lease_owner = NULL, lease_expires_at = NULL,
    event_seq = event_seq + 1
  WHERE tenant_id = $1 AND run_id = $2 AND status = ANY($3::text[])
  RETURNING tenant_id, run_id, event_seq
), ev AS (
  ${oneEvent(pgWords({ reason: '$4::text' }), STORE_RUN_EVENTS.requeued)}
)
SELECT 1 FROM u`,
  sqlite: {
    run: `UPDATE runs SET status = 'queued', status_reason = @reason, updated_at = @at, lease_owner = NULL,
  lease_expires_at = NULL, event_seq = event_seq + 1
WHERE tenant_id = @tenantId AND run_id = @runId AND status IN (SELECT value FROM json_each(@from))`,
    event: oneEvent(liteWords('reason'), STORE_RUN_EVENTS.requeued),
  },
} as const;

export const CANCEL = {
  postgres: `
WITH u AS (
  UPDATE runs SET status = 'cancelled', status_reason = $3, updated_at = oncely_now(),
    lease_owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1, event_seq = event_seq + 1
  WHERE tenant_id = $1 AND run_id = $2 AND NOT (status = ANY($4::text[]))
  RETURNING *
), ev AS (
  ${oneEvent(pgWords({ reason: '$3::text', actor: '$5::text' }), STORE_RUN_EVENTS.cancelled)}
)
SELECT u.*, ${messagesOf('u')} FROM u`,
  sqlite: {
    run: `UPDATE runs SET status = 'cancelled', status_reason = @reason, updated_at = @at, lease_owner = NULL,
  lease_expires_at = NULL, lease_epoch = lease_epoch + 1, event_seq = event_seq + 1
WHERE tenant_id = @tenantId AND run_id = @runId AND status NOT IN (SELECT value FROM json_each(@final))
RETURNING ${RUN_COLUMNS}`,
    event: oneEvent(liteWords('reason', 'actor'), STORE_RUN_EVENTS.cancelled),
  },
} as const;

/** A driver lets go of a running run at its epoch; claimable again after the delay. */
export const RELEASE = {
  postgres: `
WITH u AS (
  UPDATE runs SET status = 'queued', status_reason = $4, updated_at = oncely_now(), lease_owner = NULL,
    lease_expires_at = oncely_now() + make_interval(secs => $5::double precision / 1000),
    last_error = COALESCE($6::jsonb, last_error),
    model_outages = CASE WHEN $7 = 'model_outage' THEN model_outages + 1 ELSE model_outages END,
    drive_attempts = CASE WHEN $7 = 'failed_drive' THEN drive_attempts ELSE 0 END,
    event_seq = event_seq + 1
  WHERE tenant_id = $1 AND run_id = $2 AND lease_epoch = $3 AND status = 'running'
  RETURNING tenant_id, run_id, event_seq, lease_expires_at
), ev AS (
  ${oneEvent(pgWords({ reason: '$4::text', cause: '$7::text' }), STORE_RUN_EVENTS.released)}
)
SELECT 1 FROM u`,
  sqlite: {
    run: `UPDATE runs SET status = 'queued', status_reason = @reason, updated_at = @at, lease_owner = NULL,
  lease_expires_at = @retryAt, last_error = COALESCE(@lastError, last_error),
  model_outages = CASE WHEN @cause = 'model_outage' THEN model_outages + 1 ELSE model_outages END,
  drive_attempts = CASE WHEN @cause = 'failed_drive' THEN drive_attempts ELSE 0 END,
  event_seq = event_seq + 1
WHERE tenant_id = @tenantId AND run_id = @runId AND lease_epoch = @epoch AND status = 'running'`,
    event: oneEvent(liteWords('reason', 'cause'), STORE_RUN_EVENTS.released),
  },
} as const;

/** An operator re-drives a failed run from its last checkpoint. */
export const RETRY = {
  postgres: `
WITH u AS (
  UPDATE runs SET status = 'queued', status_reason = $3, error = NULL, updated_at = oncely_now(),
    lease_owner = NULL, lease_expires_at = NULL, drive_attempts = 0, model_outages = 0,
    event_seq = event_seq + 1
  WHERE tenant_id = $1 AND run_id = $2 AND status = 'failed'
  RETURNING *
), ev AS (
  ${oneEvent(pgWords({ reason: '$3::text', actor: '$4::text' }), STORE_RUN_EVENTS.retried)}
)
SELECT u.*, ${messagesOf('u')} FROM u`,
  sqlite: {
    run: `UPDATE runs SET status = 'queued', status_reason = @reason, error = NULL, updated_at = @at,
  lease_owner = NULL, lease_expires_at = NULL, drive_attempts = 0, model_outages = 0, event_seq = event_seq + 1
WHERE tenant_id = @tenantId AND run_id = @runId AND status = 'failed' RETURNING ${RUN_COLUMNS}`,
    event: oneEvent(liteWords('reason', 'actor'), STORE_RUN_EVENTS.retried),
  },
} as const;

export const APPEND_EVENT = {
  postgres: `
WITH r AS (
  UPDATE runs SET event_seq = event_seq + 1 WHERE tenant_id = $1 AND run_id = $2 RETURNING event_seq
)
INSERT INTO run_events (tenant_id, run_id, seq, type, data) SELECT $1, $2, event_seq, $3, $4::jsonb FROM r`,
  sqlite: {
    seq: 'UPDATE runs SET event_seq = event_seq + 1 WHERE tenant_id = ? AND run_id = ? RETURNING event_seq',
    event: 'INSERT INTO run_events (tenant_id, run_id, seq, at, type, data) VALUES (?, ?, ?, ?, ?, ?)',
  },
} as const;

/**
 * A page of the runs waiting in one status, after a cursor: a range of runs_waiting (schema 0006), in
 * its order. Planned for its values (the status picks the partial index), not prepared.
 */
export const LIST_WAITING = {
  postgres: `SELECT tenant_id, run_id, status, updated_at, pending
FROM runs WHERE status = $1
  AND ($3::timestamptz IS NULL OR (updated_at, tenant_id, run_id) > ($3::timestamptz, $4, $5))
ORDER BY updated_at, tenant_id, run_id LIMIT $2`,
  sqlite: `SELECT tenant_id, run_id, status, updated_at, pending
FROM runs WHERE status = @status
  AND (@at IS NULL OR (updated_at, tenant_id, run_id) > (@at, @tenantId, @runId))
ORDER BY updated_at, tenant_id, run_id LIMIT @limit`,
} as const;

/** A page of a run's events after a seq: a range of its primary key (tenant_id, run_id, seq). */
export const LAST_CLAIMS = {
  postgres: `SELECT * FROM run_events WHERE tenant_id = $1 AND run_id = $2 AND type = 'run.claimed'
ORDER BY seq DESC LIMIT $3`,
  sqlite: `SELECT * FROM run_events WHERE tenant_id = ? AND run_id = ? AND type = 'run.claimed'
ORDER BY seq DESC LIMIT ?`,
} as const;

export const RUN_EVENTS = {
  postgres:
    'SELECT * FROM run_events WHERE tenant_id = $1 AND run_id = $2 AND seq > $3 ORDER BY seq LIMIT $4',
  sqlite: 'SELECT * FROM run_events WHERE tenant_id = ? AND run_id = ? AND seq > ? ORDER BY seq LIMIT ?',
} as const;

/**
 * A page of a tenant's approvals. Of one status, in (created_at, key) order: the pending ones are a
 * range of approvals_pending, in its order. Of several, the pending ones first.
 */
function pgApprovalsPage(tenantId: string, filter: ApprovalListFilter): { text: string; values: unknown[] } {
  const values: unknown[] = [tenantId];
  const where = ['tenant_id = $1'];
  const one = filter.statuses?.length === 1 ? filter.statuses[0] : undefined;
  if (one !== undefined) {
    values.push(one);
    where.push(`status = $${values.length}`);
  } else if (filter.statuses !== undefined) {
    values.push(filter.statuses);
    where.push(`status = ANY($${values.length}::text[])`);
  }
  if (filter.after !== undefined) {
    values.push(filter.after.at, filter.after.key);
    where.push(`(created_at, idempotency_key) > ($${values.length - 1}::timestamptz, $${values.length})`);
  }
  values.push(filter.limit);
  const pendingFirst = one === undefined ? `(status = 'pending') DESC, ` : '';
  return {
    text: `SELECT * FROM approvals WHERE ${where.join(' AND ')}
       ORDER BY ${pendingFirst}created_at, idempotency_key LIMIT $${values.length}`,
    values,
  };
}

/** PostgreSQL SAVE's parameters, in the order of saveCtes. */
export function saveParams(request: SaveCheckpointRequest): unknown[] {
  const { fence, checkpoint } = request;
  const events = request.events ?? [];
  return [
    fence.tenantId,
    fence.runId,
    fence.leaseEpoch,
    fence.checkpointVersion,
    encodeJson(checkpoint.pending),
    request.status,
    encodeJson(request.result ?? null),
    encodeJson(request.error ?? null),
    request.reason ?? null,
    releasesLease(request.status),
    events.map((e) => e.type),
    events.map((e) => JSON.stringify(e.data)),
    request.modelAnswered === true,
    request.renewLease?.owner ?? null,
    request.renewLease?.leaseMs ?? null,
    checkpoint.step,
    appendedMessages(request).map((m) => JSON.stringify(m)),
    request.storedMessages,
    request.usage === undefined ? null : usageVector(request.usage),
  ];
}

/** A response's usage as the numbers SAVE adds to the run's columns (USAGE_COLUMNS' order). */
export function usageVector(usage: RunUsage): number[] {
  return [
    usage.inputTokens,
    usage.outputTokens,
    usage.reasoningTokens,
    usage.cachedInputTokens,
    usage.totalTokens,
  ];
}

/**
 * A user message sent to a completed run (no step under way) whose turns do not hold this client
 * message id: the run queued for its next turn (u), the message appended (msg), the turn written (t),
 * its events (ev). Nothing is written when the run is not completed or the id was sent before (the
 * caller reads which: `TURN_BY_CLIENT_ID`, `SUMMARY`, and says it with `unsentMessage`). Defined once:
 * PostgreSQL runs the four parts as one statement, SQLite as four in one transaction, the last three
 * only when the first changed the run.
 */
function sendMessageParts(w: Words): { u: string; msg: string; t: string; ev: string } {
  const { p, now } = w;
  return {
    u: `UPDATE runs SET status = 'queued', turn = turn + 1, turn_step = step, message_count = message_count + 1,
    checkpoint_version = checkpoint_version + 1, result = NULL, error = NULL, status_reason = ${p.reason},
    updated_at = ${now}, lease_owner = NULL, lease_expires_at = NULL, drive_attempts = 0,
    model_outages = 0, last_error = NULL, event_seq = event_seq + 2
  WHERE tenant_id = ${p.tenantId} AND run_id = ${p.runId} AND status = 'completed' AND pending IS NULL
    AND NOT EXISTS (SELECT 1 FROM run_turns t
      WHERE t.tenant_id = ${p.tenantId} AND t.run_id = ${p.runId} AND t.client_message_id = ${p.clientMessageId})`,
    msg: `INSERT INTO run_messages (tenant_id, run_id, idx, message)
  SELECT u.tenant_id, u.run_id, u.message_count - 1, ${p.message} ${w.changed()}`,
    t: `INSERT INTO run_turns (tenant_id, run_id, turn, client_message_id, message_idx, message_digest, actor_id,
    created_at)
  SELECT u.tenant_id, u.run_id, u.turn, ${p.clientMessageId}, u.message_count - 1, ${p.messageDigest}, ${p.actor}, ${now}
  ${w.changed()}
  RETURNING created_at`,
    ev: storeEvents(w, [
      { event: STORE_RUN_EVENTS.messaged, seq: 'u.event_seq - 1' },
      { event: STORE_RUN_EVENTS.messageQueued, seq: 'u.event_seq' },
    ]),
  };
}

const PG_SEND = sendMessageParts(
  pgWords({
    tenantId: '$1',
    runId: '$2',
    clientMessageId: '$3::text',
    message: '$4::jsonb',
    messageDigest: '$5::text',
    reason: '$6::text',
    actor: '$7::text',
  }),
);
const LITE_SEND = sendMessageParts(
  liteWords('clientMessageId', 'message', 'messageDigest', 'reason', 'actor'),
);

export const SEND_MESSAGE = {
  postgres: `
WITH u AS (
  ${PG_SEND.u}
  RETURNING *
), msg AS (
  ${PG_SEND.msg}
), t AS (
  ${PG_SEND.t}
), ev AS (
  ${PG_SEND.ev}
)
SELECT u.*, t.created_at AS turn_created_at FROM u, t`,
  sqlite: {
    run: `${LITE_SEND.u}\nRETURNING ${RUN_COLUMNS}`,
    message: LITE_SEND.msg,
    turn: LITE_SEND.t,
    events: LITE_SEND.ev,
  },
} as const;

const TURN_COLUMNS =
  'tenant_id, run_id, turn, client_message_id, message_idx, message_digest, actor_id, created_at';

export const TURN_BY_CLIENT_ID = {
  postgres: `SELECT ${TURN_COLUMNS} FROM run_turns WHERE tenant_id = $1 AND run_id = $2 AND client_message_id = $3`,
  sqlite: `SELECT ${TURN_COLUMNS} FROM run_turns WHERE tenant_id = ? AND run_id = ? AND client_message_id = ?`,
} as const;

export const TURNS = {
  postgres: `SELECT ${TURN_COLUMNS} FROM run_turns WHERE tenant_id = $1 AND run_id = $2 ORDER BY turn`,
  sqlite: `SELECT ${TURN_COLUMNS} FROM run_turns WHERE tenant_id = ? AND run_id = ? ORDER BY turn`,
} as const;

/**
 * A tenant's usage by agent, over its runs created in [from, to): a range of runs_by_tenant. The
 * sums come back as text on PostgreSQL (bigint sums are numeric).
 */
export const TENANT_USAGE = {
  postgres: `SELECT agent, count(*) AS runs, ${USAGE_COLUMNS.map((c) => `sum(${c}) AS ${c}`).join(', ')}
FROM runs WHERE tenant_id = $1 AND ($2::timestamptz IS NULL OR created_at >= $2::timestamptz)
  AND ($3::timestamptz IS NULL OR created_at < $3::timestamptz)
GROUP BY agent ORDER BY agent`,
  sqlite: `SELECT agent, count(*) AS runs, ${USAGE_COLUMNS.map((c) => `sum(${c}) AS ${c}`).join(', ')}
FROM runs WHERE tenant_id = @tenantId AND (@from IS NULL OR created_at >= @from)
  AND (@to IS NULL OR created_at < @to)
GROUP BY agent ORDER BY agent`,
} as const;

export const APPROVALS_PAGE = {
  postgres: pgApprovalsPage,
  /** As PostgreSQL's, with named parameters. */
  sqlite(tenantId: string, filter: ApprovalListFilter): { text: string; params: Record<string, unknown> } {
    const where = ['tenant_id = @tenantId'];
    const params: Record<string, unknown> = { tenantId, limit: filter.limit };
    const one = filter.statuses?.length === 1 ? filter.statuses[0] : undefined;
    if (one !== undefined) {
      where.push('status = @status');
      params.status = one;
    } else if (filter.statuses !== undefined) {
      where.push('status IN (SELECT value FROM json_each(@statuses))');
      params.statuses = JSON.stringify(filter.statuses);
    }
    if (filter.after !== undefined) {
      where.push('(created_at, idempotency_key) > (@afterAt, @afterKey)');
      params.afterAt = filter.after.at;
      params.afterKey = filter.after.key;
    }
    const pendingFirst = one === undefined ? `(status = 'pending') DESC, ` : '';
    return {
      text: `SELECT * FROM approvals WHERE ${where.join(' AND ')}
       ORDER BY ${pendingFirst}created_at, idempotency_key LIMIT @limit`,
      params,
    };
  },
};

/** A page of a tenant's runs, without their conversations, in (created_at, run_id) order. */
export const RUNS_PAGE = {
  postgres(tenantId: string, filter: RunListFilter): { text: string; values: unknown[] } {
    const values: unknown[] = [tenantId];
    const where = ['tenant_id = $1'];
    if (filter.statuses !== undefined) {
      values.push(filter.statuses);
      where.push(`status = ANY($${values.length}::text[])`);
    }
    if (filter.agent !== undefined) {
      values.push(filter.agent);
      where.push(`agent = $${values.length}`);
    }
    if (filter.after !== undefined) {
      values.push(filter.after.at, filter.after.runId);
      where.push(`(created_at, run_id) > ($${values.length - 1}::timestamptz, $${values.length})`);
    }
    values.push(filter.limit);
    return {
      text: `SELECT ${RUN_COLUMNS} FROM runs WHERE ${where.join(' AND ')} ORDER BY created_at, run_id LIMIT $${values.length}`,
      values,
    };
  },
  sqlite(tenantId: string, filter: RunListFilter): { text: string; params: Record<string, unknown> } {
    const where = ['tenant_id = @tenantId'];
    const params: Record<string, unknown> = { tenantId, limit: filter.limit };
    if (filter.statuses !== undefined) {
      where.push(`status IN (${filter.statuses.map((_, i) => `@s${i}`).join(', ') || 'NULL'})`);
      filter.statuses.forEach((s, i) => (params[`s${i}`] = s));
    }
    if (filter.agent !== undefined) {
      where.push('agent = @agent');
      params.agent = filter.agent;
    }
    if (filter.after !== undefined) {
      where.push('(created_at, run_id) > (@afterAt, @afterId)');
      params.afterAt = filter.after.at;
      params.afterId = filter.after.runId;
    }
    return {
      text: `SELECT ${RUN_COLUMNS} FROM runs WHERE ${where.join(' AND ')} ORDER BY created_at, run_id LIMIT @limit`,
      params,
    };
  },
};

export const CREATE_APPROVALS = {
  postgres: `INSERT INTO approvals (tenant_id, idempotency_key, run_id, tool_name, args, args_digest, repeat_of,
  status)
SELECT * , 'pending' FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[], $7::text[])
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING`,
  sqlite: `INSERT INTO approvals (tenant_id, idempotency_key, run_id, tool_name, args, args_digest, repeat_of, status,
  created_at)
VALUES (@tenantId, @idempotencyKey, @runId, @toolName, @args, @argsDigest, @repeatOf, 'pending', @at)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING`,
} as const;

export const GET_APPROVAL = {
  postgres: 'SELECT * FROM approvals WHERE tenant_id = $1 AND idempotency_key = $2',
  sqlite: 'SELECT * FROM approvals WHERE tenant_id = ? AND idempotency_key = ?',
} as const;

/** The approvals of many runs: PostgreSQL in one statement, SQLite one run at a time. */
export const APPROVALS_OF_RUNS = {
  postgres: `SELECT a.* FROM unnest($1::text[], $2::text[]) AS r (tenant_id, run_id)
CROSS JOIN LATERAL (SELECT * FROM approvals WHERE tenant_id = r.tenant_id AND run_id = r.run_id OFFSET 0) AS a`,
  sqlite: 'SELECT * FROM approvals WHERE tenant_id = ? AND run_id = ?',
} as const;

export const APPROVALS_OF_RUN = {
  postgres:
    'SELECT * FROM approvals WHERE tenant_id = $1 AND run_id = $2 ORDER BY created_at, idempotency_key',
  sqlite: 'SELECT * FROM approvals WHERE tenant_id = ? AND run_id = ? ORDER BY created_at, idempotency_key',
} as const;

/** `pending` → `approved` | `rejected`, compare-and-set. */
export const DECIDE_APPROVAL = {
  postgres: `UPDATE approvals SET status = $3, decided_by = $4, reason = $5, decided_at = oncely_now()
WHERE tenant_id = $1 AND idempotency_key = $2 AND status = 'pending' RETURNING *`,
  sqlite: `UPDATE approvals SET status = ?, decided_by = ?, reason = ?, decided_at = ?
WHERE tenant_id = ? AND idempotency_key = ? AND status = 'pending' RETURNING *`,
} as const;

/** `approved` → `consumed` for exactly this digest. */
export const CONSUME_APPROVAL = {
  postgres: `UPDATE approvals SET status = 'consumed', consumed_at = oncely_now()
WHERE tenant_id = $1 AND idempotency_key = $2 AND status = 'approved' AND args_digest = $3`,
  sqlite: `UPDATE approvals SET status = 'consumed', consumed_at = ?
WHERE tenant_id = ? AND idempotency_key = ? AND status = 'approved' AND args_digest = ?`,
} as const;
