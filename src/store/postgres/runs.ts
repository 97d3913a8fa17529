import type { JsonValue } from '../../ledger/index.js';
import {
  FINAL_RUN_STATUSES,
  type ApprovalRecord,
  type RunEvent,
  type RunRecord,
  type RunStatus,
  type RunSummary,
} from '../../run-state/index.js';
import type {
  ApprovalListFilter,
  CreateRunRequest,
  NewApproval,
  RunFence,
  RunListFilter,
  ReleaseRequest,
  RunStore,
  SaveCheckpointRequest,
  WaitingCursor,
  WaitingRun,
} from '../run-store.js';
import {
  releasesLease,
  toApproval,
  appendedMessages,
  RUN_COLUMNS,
  toRun,
  toRunEvent,
  toRunSummary,
  toWaiting,
  type ApprovalRow,
  type RunEventRow,
  type RunRow,
  type RunWithMessagesRow,
  type WaitingRow,
} from '../run-rows.js';
import { encodeJson } from '../rows.js';
import { eventDataSql, STORE_RUN_EVENTS, type RunEventDefinition } from '../run-events.js';
import { numbered, type Queryable } from './ledger.js';
import { prepared } from './prepared.js';

/**
 * When a run became claimable: a queued run when it was queued (or the time it was let go until), a
 * running one when its lease expired. The claim index (runs_claim, schema 0006) is on this, among
 * queued and running runs, so the oldest claimable run is the first entry of an index scan.
 */
const CLAIMABLE_FROM = 'COALESCE(lease_expires_at, updated_at)';

/** A store-written run event's data, as both stores define it (run-events.ts). */
const pgEvent = (event: RunEventDefinition, row: string, params?: Record<string, string>): string =>
  eventDataSql('postgres', event, row, params);

const CLAIMABLE = `status IN ('queued', 'running') AND ${CLAIMABLE_FROM} <= oncely_now()`;

const CLAIM_SET = `status = 'running', lease_owner = $1, lease_epoch = lease_epoch + 1,
  lease_expires_at = oncely_now() + make_interval(secs => $2::double precision / 1000), updated_at = oncely_now(),
  drive_attempts = drive_attempts + 1, event_seq = event_seq + 1`;

/**
 * The conversation of the run `alias` names, its messages in order as one JSON array: a range of
 * run_messages' primary key.
 */
export function messagesOf(alias: string): string {
  return `(SELECT COALESCE(json_agg(m.message ORDER BY m.idx), '[]'::json) FROM run_messages m
    WHERE m.tenant_id = ${alias}.tenant_id AND m.run_id = ${alias}.run_id) AS messages`;
}

/** The run claimable the longest, skipping rows another claimer has locked: one winner per run. */
const CLAIMED_EVENT = `
, ev AS (
  INSERT INTO run_events (tenant_id, run_id, seq, type, data)
  SELECT tenant_id, run_id, event_seq, '${STORE_RUN_EVENTS.claimed.type}', ${pgEvent(STORE_RUN_EVENTS.claimed, 'u')} FROM u
)
SELECT u.*, ${messagesOf('u')} FROM u`;

const CLAIM_NEXT = `
WITH u AS (
  UPDATE runs SET ${CLAIM_SET}
  WHERE (tenant_id, run_id) = (
    SELECT tenant_id, run_id FROM runs WHERE ${CLAIMABLE} AND ($3::text[] IS NULL OR agent = ANY($3::text[]))
    ORDER BY ${CLAIMABLE_FROM} LIMIT 1 FOR UPDATE SKIP LOCKED
  ) AND ${CLAIMABLE}
  RETURNING *
)${CLAIMED_EVENT}`;

const CLAIM = `
WITH u AS (
  UPDATE runs SET ${CLAIM_SET} WHERE tenant_id = $3 AND run_id = $4 AND ${CLAIMABLE}
    AND ($5::text[] IS NULL OR agent = ANY($5::text[]))
  RETURNING *
)${CLAIMED_EVENT}`;

const GET = `SELECT r.*, ${messagesOf('r')} FROM runs r WHERE tenant_id = $1 AND run_id = $2`;

const SUMMARY = `SELECT ${RUN_COLUMNS} FROM runs WHERE tenant_id = $1 AND run_id = $2`;

const RENEW = `
UPDATE runs SET lease_expires_at = oncely_now() + make_interval(secs => $5::double precision / 1000)
WHERE tenant_id = $1 AND run_id = $2 AND lease_epoch = $3 AND lease_owner = $4 AND status = 'running'
  AND lease_expires_at > oncely_now()`;

/** How many parameters SAVE's common table expressions take (`saveParams`). */
export const SAVE_PARAMS = 18;

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
    event_seq = event_seq + cardinality(${p(11)}::text[])
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

const SAVE = `WITH ${saveCtes(1)}
SELECT checkpoint_version FROM saved`;

/** SAVE's parameters. */
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
  ];
}

/**
 * A new run, `queued`; or, with an owner ($6), already claimed by it (as CLAIM leaves a run). Its
 * first messages ($5) are appended with it.
 */
const CREATE = `
WITH ins AS (
  INSERT INTO runs (tenant_id, run_id, agent, status, input, step, pending, message_count, checkpoint_version,
    event_seq, lease_owner, lease_epoch, lease_expires_at, drive_attempts)
  SELECT $1, $2, $3, CASE WHEN $6::text IS NULL THEN 'queued' ELSE 'running' END, $4::jsonb, $8::integer,
    $9::jsonb, cardinality($5::jsonb[]), 1,
    CASE WHEN $6::text IS NULL THEN 1 ELSE 2 END, $6, CASE WHEN $6::text IS NULL THEN 0 ELSE 1 END,
    CASE WHEN $6::text IS NULL THEN NULL ELSE oncely_now() + make_interval(secs => $7::double precision / 1000) END,
    CASE WHEN $6::text IS NULL THEN 0 ELSE 1 END
  ON CONFLICT (tenant_id, run_id) DO NOTHING
  RETURNING *
), msg AS (
  INSERT INTO run_messages (tenant_id, run_id, idx, message)
  SELECT ins.tenant_id, ins.run_id, m.n - 1, m.message FROM ins, unnest($5::jsonb[]) WITH ORDINALITY AS m(message, n)
), ev AS (
  INSERT INTO run_events (tenant_id, run_id, seq, type, data)
  SELECT tenant_id, run_id, 1, '${STORE_RUN_EVENTS.created.type}', ${pgEvent(STORE_RUN_EVENTS.created, 'ins')} FROM ins
  UNION ALL
  SELECT tenant_id, run_id, 2, '${STORE_RUN_EVENTS.claimed.type}', ${pgEvent(STORE_RUN_EVENTS.claimed, 'ins')}
  FROM ins WHERE lease_owner IS NOT NULL
)
SELECT * FROM ins`;

const REQUEUE = `
WITH u AS (
  UPDATE runs SET status = 'queued', status_reason = $4, updated_at = oncely_now(), lease_owner = NULL, lease_expires_at = NULL,
    event_seq = event_seq + 1
  WHERE tenant_id = $1 AND run_id = $2 AND status = ANY($3::text[])
  RETURNING tenant_id, run_id, event_seq
), ev AS (
  INSERT INTO run_events (tenant_id, run_id, seq, type, data)
  SELECT tenant_id, run_id, event_seq, '${STORE_RUN_EVENTS.requeued.type}', ${pgEvent(STORE_RUN_EVENTS.requeued, 'u', { reason: '$4::text' })} FROM u
)
SELECT 1 FROM u`;

const CANCEL = `
WITH u AS (
  UPDATE runs SET status = 'cancelled', status_reason = $3, updated_at = oncely_now(),
    lease_owner = NULL, lease_expires_at = NULL, lease_epoch = lease_epoch + 1, event_seq = event_seq + 1
  WHERE tenant_id = $1 AND run_id = $2 AND NOT (status = ANY($4::text[]))
  RETURNING *
), ev AS (
  INSERT INTO run_events (tenant_id, run_id, seq, type, data)
  SELECT tenant_id, run_id, event_seq, '${STORE_RUN_EVENTS.cancelled.type}',
    ${pgEvent(STORE_RUN_EVENTS.cancelled, 'u', { reason: '$3::text', actor: '$5::text' })} FROM u
)
SELECT u.*, ${messagesOf('u')} FROM u`;

/** A driver lets go of a running run at its epoch; claimable again after the delay. */
const RELEASE = `
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
  INSERT INTO run_events (tenant_id, run_id, seq, type, data)
  SELECT tenant_id, run_id, event_seq, '${STORE_RUN_EVENTS.released.type}',
    ${pgEvent(STORE_RUN_EVENTS.released, 'u', { reason: '$4::text', cause: '$7::text' })} FROM u
)
SELECT 1 FROM u`;

/** An operator re-drives a failed run from its last checkpoint. */
const RETRY = `
WITH u AS (
  UPDATE runs SET status = 'queued', status_reason = $3, error = NULL, updated_at = oncely_now(),
    lease_owner = NULL, lease_expires_at = NULL, drive_attempts = 0, model_outages = 0,
    event_seq = event_seq + 1
  WHERE tenant_id = $1 AND run_id = $2 AND status = 'failed'
  RETURNING *
), ev AS (
  INSERT INTO run_events (tenant_id, run_id, seq, type, data)
  SELECT tenant_id, run_id, event_seq, '${STORE_RUN_EVENTS.retried.type}',
    ${pgEvent(STORE_RUN_EVENTS.retried, 'u', { reason: '$3::text', actor: '$4::text' })} FROM u
)
SELECT u.*, ${messagesOf('u')} FROM u`;

const APPEND_EVENT = `
WITH r AS (
  UPDATE runs SET event_seq = event_seq + 1 WHERE tenant_id = $1 AND run_id = $2 RETURNING event_seq
)
INSERT INTO run_events (tenant_id, run_id, seq, type, data) SELECT $1, $2, event_seq, $3, $4::jsonb FROM r`;

/**
 * A page of the runs waiting in one status, after a cursor: a range of runs_waiting (schema 0006), in
 * its order. Planned for its values (the status picks the partial index), not prepared.
 */
export const LIST_WAITING = `SELECT tenant_id, run_id, status, updated_at, pending
FROM runs WHERE status = $1
  AND ($3::timestamptz IS NULL OR (updated_at, tenant_id, run_id) > ($3::timestamptz, $4, $5))
ORDER BY updated_at, tenant_id, run_id LIMIT $2`;

/** A page of a run's events after a seq: a range of its primary key (tenant_id, run_id, seq). */
export const RUN_EVENTS =
  'SELECT * FROM run_events WHERE tenant_id = $1 AND run_id = $2 AND seq > $3 ORDER BY seq LIMIT $4';

/**
 * A page of a tenant's approvals. Of one status, in (created_at, key) order: the pending ones are a
 * range of approvals_pending, in its order. Of several, the pending ones first.
 */
export function approvalsPage(
  tenantId: string,
  filter: ApprovalListFilter,
): { text: string; values: unknown[] } {
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

export class PostgresRuns implements RunStore {
  constructor(private readonly db: Queryable) {}

  async create(request: CreateRunRequest): Promise<{ created: boolean; run: RunRecord }> {
    const { rows } = await this.db.query<RunRow>(prepared('oncely_create_run', CREATE), [
      request.tenantId,
      request.runId,
      request.agent,
      encodeJson(request.input),
      request.checkpoint.messages.map((m) => JSON.stringify(m)),
      request.claim?.owner ?? null,
      request.claim?.leaseMs ?? null,
      request.checkpoint.step,
      encodeJson(request.checkpoint.pending),
    ]);
    if (rows[0] !== undefined) return { created: true, run: toRun(rows[0], request.checkpoint.messages) };
    const run = await this.get(request.tenantId, request.runId);
    if (run === undefined) throw new Error(`run ${request.runId} neither created nor found`);
    return { created: false, run };
  }

  async get(tenantId: string, runId: string): Promise<RunRecord | undefined> {
    const { rows } = await this.db.query<RunWithMessagesRow>(prepared('oncely_get_run', GET), [
      tenantId,
      runId,
    ]);
    return rows[0] === undefined ? undefined : toRun(rows[0]);
  }

  async summary(tenantId: string, runId: string): Promise<RunSummary | undefined> {
    const { rows } = await this.db.query<RunRow>(prepared('oncely_run_summary', SUMMARY), [tenantId, runId]);
    return rows[0] === undefined ? undefined : toRunSummary(rows[0]);
  }

  async list(tenantId: string, filter: RunListFilter): Promise<RunSummary[]> {
    const params: unknown[] = [tenantId];
    const where = ['tenant_id = $1'];
    if (filter.statuses !== undefined) {
      params.push(filter.statuses);
      where.push(`status = ANY($${params.length}::text[])`);
    }
    if (filter.agent !== undefined) {
      params.push(filter.agent);
      where.push(`agent = $${params.length}`);
    }
    if (filter.after !== undefined) {
      params.push(filter.after.at, filter.after.runId);
      where.push(`(created_at, run_id) > ($${params.length - 1}::timestamptz, $${params.length})`);
    }
    params.push(filter.limit);
    const { rows } = await this.db.query<RunRow>(
      `SELECT ${RUN_COLUMNS} FROM runs WHERE ${where.join(' AND ')} ORDER BY created_at, run_id LIMIT $${params.length}`,
      params,
    );
    return rows.map(toRunSummary);
  }

  async claimNext(
    owner: string,
    leaseMs: number,
    agents?: readonly string[],
  ): Promise<RunRecord | undefined> {
    const { rows } = await this.db.query<RunWithMessagesRow>(prepared('oncely_claim_next', CLAIM_NEXT), [
      owner,
      leaseMs,
      agents ?? null,
    ]);
    return rows[0] === undefined ? undefined : toRun(rows[0]);
  }

  async claim(
    tenantId: string,
    runId: string,
    owner: string,
    leaseMs: number,
    agents?: readonly string[],
  ): Promise<RunRecord | undefined> {
    const { rows } = await this.db.query<RunWithMessagesRow>(prepared('oncely_claim', CLAIM), [
      owner,
      leaseMs,
      tenantId,
      runId,
      agents ?? null,
    ]);
    return rows[0] === undefined ? undefined : toRun(rows[0]);
  }

  async renewLease(
    fence: Omit<RunFence, 'checkpointVersion'>,
    owner: string,
    leaseMs: number,
  ): Promise<boolean> {
    const result = await this.db.query(prepared('oncely_renew', RENEW), [
      fence.tenantId,
      fence.runId,
      fence.leaseEpoch,
      owner,
      leaseMs,
    ]);
    return result.rowCount === 1;
  }

  async saveCheckpoint(request: SaveCheckpointRequest): Promise<number | undefined> {
    const { rows } = await this.db.query<{ checkpoint_version: string }>(
      prepared('oncely_save', SAVE),
      saveParams(request),
    );
    return rows[0] === undefined ? undefined : Number(rows[0].checkpoint_version);
  }

  async release(request: ReleaseRequest): Promise<boolean> {
    const { fence } = request;
    const result = await this.db.query(RELEASE, [
      fence.tenantId,
      fence.runId,
      fence.leaseEpoch,
      request.reason,
      Math.max(0, Math.round(request.delayMs)),
      encodeJson(request.lastError ?? null),
      request.cause,
    ]);
    return result.rowCount === 1;
  }

  async retry(
    tenantId: string,
    runId: string,
    reason: string,
    actorId: string,
  ): Promise<RunRecord | undefined> {
    const { rows } = await this.db.query<RunWithMessagesRow>(RETRY, [tenantId, runId, reason, actorId]);
    return rows[0] === undefined ? undefined : toRun(rows[0]);
  }

  async requeue(
    tenantId: string,
    runId: string,
    from: readonly RunStatus[],
    reason: string,
  ): Promise<boolean> {
    const result = await this.db.query(REQUEUE, [tenantId, runId, from, reason]);
    return result.rowCount === 1;
  }

  async cancel(
    tenantId: string,
    runId: string,
    reason: string,
    actorId: string,
  ): Promise<RunRecord | undefined> {
    const { rows } = await this.db.query<RunWithMessagesRow>(CANCEL, [
      tenantId,
      runId,
      reason,
      FINAL_RUN_STATUSES,
      actorId,
    ]);
    return rows[0] === undefined ? undefined : toRun(rows[0]);
  }

  async listWaiting(status: RunStatus, limit: number, after?: WaitingCursor): Promise<WaitingRun[]> {
    const { rows } = await this.db.query<WaitingRow>(LIST_WAITING, [
      status,
      limit,
      after?.at ?? null,
      after?.tenantId ?? null,
      after?.runId ?? null,
    ]);
    return rows.map(toWaiting);
  }

  async appendEvent(tenantId: string, runId: string, type: string, data: JsonValue): Promise<void> {
    await this.db.query(APPEND_EVENT, [tenantId, runId, type, JSON.stringify(data)]);
  }

  async events(tenantId: string, runId: string, afterSeq: number, limit: number): Promise<RunEvent[]> {
    const { rows } = await this.db.query<RunEventRow>(RUN_EVENTS, [tenantId, runId, afterSeq, limit]);
    return rows.map(toRunEvent);
  }

  async createApprovals(approvals: readonly NewApproval[]): Promise<void> {
    if (approvals.length === 0) return;
    await this.db.query(
      `INSERT INTO approvals (tenant_id, idempotency_key, run_id, tool_name, args, args_digest, status)
       SELECT * , 'pending' FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::text[])
       ON CONFLICT (tenant_id, idempotency_key) DO NOTHING`,
      [
        approvals.map((a) => a.tenantId),
        approvals.map((a) => a.idempotencyKey),
        approvals.map((a) => a.runId),
        approvals.map((a) => a.toolName),
        approvals.map((a) => JSON.stringify(a.args)),
        approvals.map((a) => a.argsDigest),
      ],
    );
  }

  async getApproval(tenantId: string, idempotencyKey: string): Promise<ApprovalRecord | undefined> {
    const { rows } = await this.db.query<ApprovalRow>(
      'SELECT * FROM approvals WHERE tenant_id = $1 AND idempotency_key = $2',
      [tenantId, idempotencyKey],
    );
    return rows[0] === undefined ? undefined : toApproval(rows[0]);
  }

  async approvalsOfRuns(
    runs: readonly { readonly tenantId: string; readonly runId: string }[],
  ): Promise<ApprovalRecord[]> {
    if (runs.length === 0) return [];
    const { rows } = await this.db.query<ApprovalRow>(
      `SELECT a.* FROM unnest($1::text[], $2::text[]) AS r (tenant_id, run_id)
       CROSS JOIN LATERAL (SELECT * FROM approvals WHERE tenant_id = r.tenant_id AND run_id = r.run_id OFFSET 0) AS a`,
      [runs.map((r) => r.tenantId), runs.map((r) => r.runId)],
    );
    return rows.map(toApproval);
  }

  async approvalsOfRun(tenantId: string, runId: string): Promise<ApprovalRecord[]> {
    const { rows } = await this.db.query<ApprovalRow>(
      'SELECT * FROM approvals WHERE tenant_id = $1 AND run_id = $2 ORDER BY created_at, idempotency_key',
      [tenantId, runId],
    );
    return rows.map(toApproval);
  }

  async listApprovals(tenantId: string, filter: ApprovalListFilter): Promise<ApprovalRecord[]> {
    const { rows } = await this.db.query<ApprovalRow>(approvalsPage(tenantId, filter));
    return rows.map(toApproval);
  }

  async decideApproval(
    tenantId: string,
    idempotencyKey: string,
    decision: 'approved' | 'rejected',
    actorId: string,
    reason: string | null,
  ): Promise<ApprovalRecord | undefined> {
    const { rows } = await this.db.query<ApprovalRow>(
      `UPDATE approvals SET status = $3, decided_by = $4, reason = $5, decided_at = oncely_now()
       WHERE tenant_id = $1 AND idempotency_key = $2 AND status = 'pending' RETURNING *`,
      [tenantId, idempotencyKey, decision, actorId, reason],
    );
    return rows[0] === undefined ? undefined : toApproval(rows[0]);
  }

  async consumeApproval(tenantId: string, idempotencyKey: string, argsDigest: string): Promise<boolean> {
    const result = await this.db.query(
      `UPDATE approvals SET status = 'consumed', consumed_at = oncely_now()
       WHERE tenant_id = $1 AND idempotency_key = $2 AND status = 'approved' AND args_digest = $3`,
      [tenantId, idempotencyKey, argsDigest],
    );
    return result.rowCount === 1;
  }
}
