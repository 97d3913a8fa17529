import type Database from 'better-sqlite3';
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
  appendedMessages,
  releasesLease,
  RUN_COLUMNS,
  toApproval,
  toRun,
  toRunEvent,
  toRunSummary,
  toWaiting,
  type ApprovalRow,
  type RunEventRow,
  type RunRow,
  type WaitingRow,
} from '../run-rows.js';
import { encodeJson } from '../rows.js';
import { eventDataSql, STORE_RUN_EVENTS, type RunEventDefinition } from '../run-events.js';
import { settle } from './settle.js';

const now = (): string => new Date().toISOString();
const later = (ms: number): string => new Date(Date.now() + ms).toISOString();

/** When a run became claimable (see the PostgreSQL store); runs_claim (schema 0006) is on it. */
const CLAIMABLE_FROM = 'COALESCE(lease_expires_at, updated_at)';

const CLAIMABLE = `status IN ('queued', 'running') AND ${CLAIMABLE_FROM} <= @now`;
const CLAIM_SET = `status = 'running', lease_owner = @owner, lease_epoch = lease_epoch + 1,
  lease_expires_at = @expires, updated_at = @now, drive_attempts = drive_attempts + 1`;

/** Runs, events and approvals on one better-sqlite3 connection; each method is one transaction. */
export class SqliteRuns implements RunStore {
  constructor(private readonly db: Database.Database) {}

  /** Appends an event numbered by the run's own sequence; callers run it inside their transaction. */
  private event(tenantId: string, runId: string, type: string, data: unknown, at = now()): void {
    const next = this.db
      .prepare<[string, string], { event_seq: number }>(
        'UPDATE runs SET event_seq = event_seq + 1 WHERE tenant_id = ? AND run_id = ? RETURNING event_seq',
      )
      .get(tenantId, runId);
    if (next === undefined) throw new Error(`no run ${runId} to append an event to`);
    this.db
      .prepare('INSERT INTO run_events (tenant_id, run_id, seq, at, type, data) VALUES (?, ?, ?, ?, ?, ?)')
      .run(tenantId, runId, next.event_seq, at, type, JSON.stringify(data));
  }

  /**
   * Appends an event the store writes itself, as both stores define it (run-events.ts): its data
   * from the run's row as it now stands and these parameters. Inside the caller's transaction.
   */
  private storeEvent(
    tenantId: string,
    runId: string,
    event: RunEventDefinition,
    params: Readonly<Record<string, string>>,
    at: string,
  ): void {
    const placeholders = Object.fromEntries(Object.keys(params).map((name) => [name, `@p_${name}`]));
    const bound = Object.fromEntries(Object.entries(params).map(([name, v]) => [`p_${name}`, v]));
    const inserted = this.db
      .prepare(
        `INSERT INTO run_events (tenant_id, run_id, seq, at, type, data)
         SELECT tenant_id, run_id, event_seq + 1, @at, @type, ${eventDataSql('sqlite', event, 'runs', placeholders)}
         FROM runs WHERE tenant_id = @tenantId AND run_id = @runId`,
      )
      .run({ ...bound, at, type: event.type, tenantId, runId });
    if (inserted.changes !== 1) throw new Error(`no run ${runId} to append an event to`);
    this.db
      .prepare('UPDATE runs SET event_seq = event_seq + 1 WHERE tenant_id = ? AND run_id = ?')
      .run(tenantId, runId);
  }

  private row(tenantId: string, runId: string): RunRow | undefined {
    return this.db
      .prepare<[string, string], RunRow>(`SELECT ${RUN_COLUMNS} FROM runs WHERE tenant_id = ? AND run_id = ?`)
      .get(tenantId, runId);
  }

  /** The run of this row with its conversation, read in order (inside the caller's transaction). */
  private withMessages(row: RunRow): RunRecord {
    const messages = this.db
      .prepare<[string, string], { message: string }>(
        'SELECT message FROM run_messages WHERE tenant_id = ? AND run_id = ? ORDER BY idx',
      )
      .all(row.tenant_id, row.run_id)
      .map((m) => JSON.parse(m.message) as JsonValue);
    return toRun(row, messages);
  }

  /** Appends messages to a run's conversation from position `from` (inside the caller's transaction). */
  private append(tenantId: string, runId: string, from: number, messages: readonly JsonValue[]): void {
    const insert = this.db.prepare(
      'INSERT INTO run_messages (tenant_id, run_id, idx, message) VALUES (?, ?, ?, ?)',
    );
    messages.forEach((m, i) => insert.run(tenantId, runId, from + i, JSON.stringify(m)));
  }

  create(request: CreateRunRequest): Promise<{ created: boolean; run: RunRecord }> {
    return settle(() =>
      this.db.transaction(() => {
        const at = now();
        const inserted = this.db
          .prepare<[Record<string, unknown>], RunRow>(
            `INSERT INTO runs (tenant_id, run_id, agent, status, input, step, pending, message_count,
               checkpoint_version, created_at, updated_at)
             VALUES (@tenantId, @runId, @agent, 'queued', @input, @step, @pending, @messageCount, 1, @at, @at)
             ON CONFLICT (tenant_id, run_id) DO NOTHING RETURNING ${RUN_COLUMNS}`,
          )
          .get({
            tenantId: request.tenantId,
            runId: request.runId,
            agent: request.agent,
            input: encodeJson(request.input),
            step: request.checkpoint.step,
            pending: encodeJson(request.checkpoint.pending),
            messageCount: request.checkpoint.messages.length,
            at,
          });
        if (inserted !== undefined) {
          this.append(request.tenantId, request.runId, 0, request.checkpoint.messages);
          this.storeEvent(request.tenantId, request.runId, STORE_RUN_EVENTS.created, {}, at);
          if (request.claim === undefined) {
            return { created: true, run: toRun(inserted, request.checkpoint.messages) };
          }
          // Claimed in the same transaction, as `claim` claims it.
          const { owner, leaseMs } = request.claim;
          const claimed = this.claimSync(request.tenantId, request.runId, owner, leaseMs, undefined, at);
          if (claimed === undefined) throw new Error(`run ${request.runId} created but not claimed`);
          return { created: true, run: claimed };
        }
        const existing = this.row(request.tenantId, request.runId);
        if (existing === undefined) throw new Error(`run ${request.runId} neither created nor found`);
        return { created: false, run: this.withMessages(existing) };
      })(),
    );
  }

  get(tenantId: string, runId: string): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db.transaction(() => {
        const row = this.row(tenantId, runId);
        return row === undefined ? undefined : this.withMessages(row);
      })(),
    );
  }

  summary(tenantId: string, runId: string): Promise<RunSummary | undefined> {
    return settle(() => {
      const row = this.row(tenantId, runId);
      return row === undefined ? undefined : toRunSummary(row);
    });
  }

  list(tenantId: string, filter: RunListFilter): Promise<RunSummary[]> {
    return settle(() => {
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
      return this.db
        .prepare<[Record<string, unknown>], RunRow>(
          `SELECT ${RUN_COLUMNS} FROM runs WHERE ${where.join(' AND ')} ORDER BY created_at, run_id LIMIT @limit`,
        )
        .all(params)
        .map(toRunSummary);
    });
  }

  claimNext(owner: string, leaseMs: number, agents?: readonly string[]): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db
        .transaction(() => {
          const params = {
            owner,
            now: now(),
            expires: later(leaseMs),
            agents: agents === undefined ? null : JSON.stringify(agents),
          };
          const row = this.db
            .prepare<[Record<string, unknown>], RunRow>(
              `UPDATE runs SET ${CLAIM_SET} WHERE rowid = (
                 SELECT rowid FROM runs WHERE ${CLAIMABLE}
                   AND (@agents IS NULL OR agent IN (SELECT value FROM json_each(@agents)))
                 ORDER BY ${CLAIMABLE_FROM} LIMIT 1) RETURNING ${RUN_COLUMNS}`,
            )
            .get(params);
          return row === undefined ? undefined : this.claimed(row, params.now);
        })
        .immediate(),
    );
  }

  claim(
    tenantId: string,
    runId: string,
    owner: string,
    leaseMs: number,
    agents?: readonly string[],
  ): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db.transaction(() => this.claimSync(tenantId, runId, owner, leaseMs, agents, now())).immediate(),
    );
  }

  /** Claims this run if it is claimable (and of one of `agents`), inside the caller's transaction. */
  private claimSync(
    tenantId: string,
    runId: string,
    owner: string,
    leaseMs: number,
    agents: readonly string[] | undefined,
    at: string,
  ): RunRecord | undefined {
    const row = this.db
      .prepare<[Record<string, unknown>], RunRow>(
        `UPDATE runs SET ${CLAIM_SET} WHERE tenant_id = @tenantId AND run_id = @runId AND ${CLAIMABLE}
           AND (@agents IS NULL OR agent IN (SELECT value FROM json_each(@agents))) RETURNING ${RUN_COLUMNS}`,
      )
      .get({
        owner,
        now: at,
        expires: later(leaseMs),
        tenantId,
        runId,
        agents: agents === undefined ? null : JSON.stringify(agents),
      });
    return row === undefined ? undefined : this.claimed(row, at);
  }

  private claimed(row: RunRow, at: string): RunRecord {
    const run = this.withMessages(row);
    this.storeEvent(run.tenantId, run.runId, STORE_RUN_EVENTS.claimed, {}, at);
    return run;
  }

  renewLease(fence: Omit<RunFence, 'checkpointVersion'>, owner: string, leaseMs: number): Promise<boolean> {
    return settle(() => this.renewSync(fence, owner, leaseMs));
  }

  private renewSync(fence: Omit<RunFence, 'checkpointVersion'>, owner: string, leaseMs: number): boolean {
    return (
      this.db
        .prepare(
          `UPDATE runs SET lease_expires_at = ? WHERE tenant_id = ? AND run_id = ? AND lease_epoch = ?
           AND lease_owner = ? AND status = 'running' AND lease_expires_at > ?`,
        )
        .run(later(leaseMs), fence.tenantId, fence.runId, fence.leaseEpoch, owner, now()).changes === 1
    );
  }

  saveCheckpoint(request: SaveCheckpointRequest): Promise<number | undefined> {
    return settle(() =>
      this.db.transaction(() => {
        const at = now();
        const { fence } = request;
        const renew = request.renewLease;
        const appended = appendedMessages(request);
        if (renew !== undefined && !this.renewSync(fence, renew.owner, renew.leaseMs)) return undefined;
        const row = this.db
          .prepare<[Record<string, unknown>], { checkpoint_version: number }>(
            `UPDATE runs SET pending = @pending, step = @step, message_count = message_count + @appended,
               checkpoint_version = checkpoint_version + 1, status = @status,
               result = COALESCE(@result, result), error = @error, status_reason = @reason, updated_at = @at,
               lease_owner = CASE WHEN @release THEN NULL ELSE lease_owner END,
               lease_expires_at = CASE WHEN @release THEN NULL ELSE lease_expires_at END,
               drive_attempts = CASE WHEN @release THEN 0 ELSE drive_attempts END,
               model_outages = CASE WHEN @modelAnswered THEN 0 ELSE model_outages END
             WHERE tenant_id = @tenantId AND run_id = @runId AND lease_epoch = @epoch
               AND checkpoint_version = @version AND status = 'running' AND message_count = @stored
             RETURNING checkpoint_version`,
          )
          .get({
            tenantId: fence.tenantId,
            runId: fence.runId,
            epoch: fence.leaseEpoch,
            version: fence.checkpointVersion,
            pending: encodeJson(request.checkpoint.pending),
            step: request.checkpoint.step,
            appended: appended.length,
            stored: request.storedMessages,
            status: request.status,
            result: encodeJson(request.result ?? null),
            error: encodeJson(request.error ?? null),
            reason: request.reason ?? null,
            release: releasesLease(request.status) ? 1 : 0,
            modelAnswered: request.modelAnswered === true ? 1 : 0,
            at,
          });
        if (row === undefined) return undefined;
        this.append(fence.tenantId, fence.runId, request.storedMessages, appended);
        for (const e of request.events ?? []) this.event(fence.tenantId, fence.runId, e.type, e.data, at);
        return row.checkpoint_version;
      })(),
    );
  }

  requeue(tenantId: string, runId: string, from: readonly RunStatus[], reason: string): Promise<boolean> {
    return settle(() =>
      this.db.transaction(() => {
        const at = now();
        const changes = this.db
          .prepare(
            `UPDATE runs SET status = 'queued', status_reason = ?, updated_at = ?, lease_owner = NULL, lease_expires_at = NULL
             WHERE tenant_id = ? AND run_id = ? AND status IN (SELECT value FROM json_each(?))`,
          )
          .run(reason, at, tenantId, runId, JSON.stringify(from)).changes;
        if (changes === 1) this.storeEvent(tenantId, runId, STORE_RUN_EVENTS.requeued, { reason }, at);
        return changes === 1;
      })(),
    );
  }

  cancel(tenantId: string, runId: string, reason: string, actorId: string): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db.transaction(() => {
        const at = now();
        const row = this.db
          .prepare<[string, string, string, string, string], RunRow>(
            `UPDATE runs SET status = 'cancelled', status_reason = ?, updated_at = ?, lease_owner = NULL,
               lease_expires_at = NULL, lease_epoch = lease_epoch + 1
             WHERE tenant_id = ? AND run_id = ? AND status NOT IN (SELECT value FROM json_each(?)) RETURNING ${RUN_COLUMNS}`,
          )
          .get(reason, at, tenantId, runId, JSON.stringify(FINAL_RUN_STATUSES));
        if (row === undefined) return undefined;
        this.storeEvent(tenantId, runId, STORE_RUN_EVENTS.cancelled, { reason, actor: actorId }, at);
        return this.withMessages(row);
      })(),
    );
  }

  listWaiting(status: RunStatus, limit: number, after?: WaitingCursor): Promise<WaitingRun[]> {
    return settle(() =>
      this.db
        .prepare<[Record<string, unknown>], WaitingRow>(
          `SELECT tenant_id, run_id, status, updated_at, pending
           FROM runs WHERE status = @status
             AND (@at IS NULL OR (updated_at, tenant_id, run_id) > (@at, @tenantId, @runId))
           ORDER BY updated_at, tenant_id, run_id LIMIT @limit`,
        )
        .all({
          status,
          limit,
          at: after?.at ?? null,
          tenantId: after?.tenantId ?? null,
          runId: after?.runId ?? null,
        })
        .map(toWaiting),
    );
  }

  release(request: ReleaseRequest): Promise<boolean> {
    return settle(() =>
      this.db
        .transaction(() => {
          const at = now();
          const { fence } = request;
          const retryAt = later(Math.max(0, Math.round(request.delayMs)));
          const changes = this.db
            .prepare(
              `UPDATE runs SET status = 'queued', status_reason = @reason, updated_at = @at, lease_owner = NULL,
                 lease_expires_at = @retryAt, last_error = COALESCE(@lastError, last_error),
                 model_outages = CASE WHEN @cause = 'model_outage' THEN model_outages + 1 ELSE model_outages END,
                 drive_attempts = CASE WHEN @cause = 'failed_drive' THEN drive_attempts ELSE 0 END
               WHERE tenant_id = @tenantId AND run_id = @runId AND lease_epoch = @epoch AND status = 'running'`,
            )
            .run({
              tenantId: fence.tenantId,
              runId: fence.runId,
              epoch: fence.leaseEpoch,
              reason: request.reason,
              at,
              retryAt,
              lastError: encodeJson(request.lastError ?? null),
              cause: request.cause,
            }).changes;
          if (changes !== 1) return false;
          this.storeEvent(
            fence.tenantId,
            fence.runId,
            STORE_RUN_EVENTS.released,
            { reason: request.reason, cause: request.cause },
            at,
          );
          return true;
        })
        .immediate(),
    );
  }

  retry(tenantId: string, runId: string, reason: string, actorId: string): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db
        .transaction(() => {
          const at = now();
          const row = this.db
            .prepare<[string, string, string, string], RunRow>(
              `UPDATE runs SET status = 'queued', status_reason = ?, error = NULL, updated_at = ?,
                 lease_owner = NULL, lease_expires_at = NULL, drive_attempts = 0, model_outages = 0
               WHERE tenant_id = ? AND run_id = ? AND status = 'failed' RETURNING ${RUN_COLUMNS}`,
            )
            .get(reason, at, tenantId, runId);
          if (row === undefined) return undefined;
          this.storeEvent(tenantId, runId, STORE_RUN_EVENTS.retried, { reason, actor: actorId }, at);
          return this.withMessages(row);
        })
        .immediate(),
    );
  }

  appendEvent(tenantId: string, runId: string, type: string, data: JsonValue): Promise<void> {
    return settle(() => this.db.transaction(() => this.event(tenantId, runId, type, data)).immediate());
  }

  events(tenantId: string, runId: string, afterSeq: number, limit: number): Promise<RunEvent[]> {
    return settle(() =>
      this.db
        .prepare<[string, string, number, number], RunEventRow>(
          'SELECT * FROM run_events WHERE tenant_id = ? AND run_id = ? AND seq > ? ORDER BY seq LIMIT ?',
        )
        .all(tenantId, runId, afterSeq, limit)
        .map(toRunEvent),
    );
  }

  createApprovals(approvals: readonly NewApproval[]): Promise<void> {
    return settle(() =>
      this.db.transaction(() => {
        const insert = this.db.prepare(
          `INSERT INTO approvals (tenant_id, idempotency_key, run_id, tool_name, args, args_digest, status, created_at)
           VALUES (@tenantId, @idempotencyKey, @runId, @toolName, @args, @argsDigest, 'pending', @at)
           ON CONFLICT (tenant_id, idempotency_key) DO NOTHING`,
        );
        const at = now();
        for (const a of approvals) insert.run({ ...a, args: JSON.stringify(a.args), at });
      })(),
    );
  }

  getApproval(tenantId: string, idempotencyKey: string): Promise<ApprovalRecord | undefined> {
    return settle(() => {
      const row = this.db
        .prepare<[string, string], ApprovalRow>(
          'SELECT * FROM approvals WHERE tenant_id = ? AND idempotency_key = ?',
        )
        .get(tenantId, idempotencyKey);
      return row === undefined ? undefined : toApproval(row);
    });
  }

  approvalsOfRuns(
    runs: readonly { readonly tenantId: string; readonly runId: string }[],
  ): Promise<ApprovalRecord[]> {
    return settle(() => {
      const statement = this.db.prepare<[string, string], ApprovalRow>(
        'SELECT * FROM approvals WHERE tenant_id = ? AND run_id = ?',
      );
      return runs.flatMap((r) => statement.all(r.tenantId, r.runId).map(toApproval));
    });
  }

  approvalsOfRun(tenantId: string, runId: string): Promise<ApprovalRecord[]> {
    return settle(() =>
      this.db
        .prepare<[string, string], ApprovalRow>(
          'SELECT * FROM approvals WHERE tenant_id = ? AND run_id = ? ORDER BY created_at, idempotency_key',
        )
        .all(tenantId, runId)
        .map(toApproval),
    );
  }

  listApprovals(tenantId: string, filter: ApprovalListFilter): Promise<ApprovalRecord[]> {
    return settle(() => {
      const where = ['tenant_id = @tenantId'];
      const params: Record<string, unknown> = { tenantId, limit: filter.limit };
      // Of one status, in (created_at, key) order: the pending ones are a range of approvals_pending.
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
      return this.db
        .prepare<[Record<string, unknown>], ApprovalRow>(
          `SELECT * FROM approvals WHERE ${where.join(' AND ')}
           ORDER BY ${one === undefined ? `(status = 'pending') DESC, ` : ''}created_at, idempotency_key LIMIT @limit`,
        )
        .all(params)
        .map(toApproval);
    });
  }

  decideApproval(
    tenantId: string,
    idempotencyKey: string,
    decision: 'approved' | 'rejected',
    actorId: string,
    reason: string | null,
  ): Promise<ApprovalRecord | undefined> {
    return settle(() => {
      const row = this.db
        .prepare<[string, string, string | null, string, string, string], ApprovalRow>(
          `UPDATE approvals SET status = ?, decided_by = ?, reason = ?, decided_at = ?
           WHERE tenant_id = ? AND idempotency_key = ? AND status = 'pending' RETURNING *`,
        )
        .get(decision, actorId, reason, now(), tenantId, idempotencyKey);
      return row === undefined ? undefined : toApproval(row);
    });
  }

  consumeApproval(tenantId: string, idempotencyKey: string, argsDigest: string): Promise<boolean> {
    return settle(
      () =>
        this.db
          .prepare(
            `UPDATE approvals SET status = 'consumed', consumed_at = ?
             WHERE tenant_id = ? AND idempotency_key = ? AND status = 'approved' AND args_digest = ?`,
          )
          .run(now(), tenantId, idempotencyKey, argsDigest).changes === 1,
    );
  }
}
