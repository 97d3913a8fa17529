import type { JsonValue } from '../../ledger/index.js';
import {
  FINAL_RUN_STATUSES,
  type ApprovalRecord,
  type RunEvent,
  type RunRecord,
  type RunStatus,
  type RunSummary,
  type RunTurn,
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
  SendMessageRequest,
  SendMessageResult,
  TenantUsage,
  UsageFilter,
  WaitingCursor,
  WaitingRun,
} from '../run-store.js';
import {
  toApproval,
  toRun,
  toRunEvent,
  toRunSummary,
  toWaiting,
  toRunTurn,
  sentMessage,
  unsentMessage,
  tenantUsage,
  type UsageRow,
  type RunTurnRow,
  type ApprovalRow,
  type RunEventRow,
  type RunRow,
  type RunWithMessagesRow,
  type WaitingRow,
} from '../run-rows.js';
import { encodeJson } from '../rows.js';
import type { Queryable } from './ledger.js';
import {
  APPEND_EVENT,
  APPROVALS_OF_RUN,
  APPROVALS_OF_RUNS,
  APPROVALS_PAGE,
  CANCEL,
  CLAIM,
  CLAIM_NEXT,
  CONSUME_APPROVAL,
  CREATE,
  CREATE_APPROVALS,
  DECIDE_APPROVAL,
  GET,
  GET_APPROVAL,
  LIST_WAITING,
  RELEASE,
  RENEW,
  REQUEUE,
  RETRY,
  LAST_CLAIMS,
  RUN_EVENTS,
  RUNS_PAGE,
  SAVE,
  SUMMARY,
  SEND_MESSAGE,
  TURN_BY_CLIENT_ID,
  TURNS,
  TENANT_USAGE,
  saveParams,
} from '../runs-sql.js';
import { prepared } from './prepared.js';

export class PostgresRuns implements RunStore {
  constructor(private readonly db: Queryable) {}

  async create(request: CreateRunRequest): Promise<{ created: boolean; run: RunRecord }> {
    const { rows } = await this.db.query<RunRow>(prepared('oncely_create_run', CREATE.postgres), [
      request.tenantId,
      request.runId,
      request.agent,
      encodeJson(request.input),
      request.checkpoint.messages.map((m) => JSON.stringify(m)),
      request.claim?.owner ?? null,
      request.claim?.leaseMs ?? null,
      request.checkpoint.step,
      encodeJson(request.checkpoint.pending),
      request.tokenBudget ?? null,
    ]);
    if (rows[0] !== undefined) return { created: true, run: toRun(rows[0], request.checkpoint.messages) };
    const run = await this.get(request.tenantId, request.runId);
    if (run === undefined) throw new Error(`run ${request.runId} neither created nor found`);
    return { created: false, run };
  }

  async get(tenantId: string, runId: string): Promise<RunRecord | undefined> {
    const { rows } = await this.db.query<RunWithMessagesRow>(prepared('oncely_get_run', GET.postgres), [
      tenantId,
      runId,
    ]);
    return rows[0] === undefined ? undefined : toRun(rows[0]);
  }

  async summary(tenantId: string, runId: string): Promise<RunSummary | undefined> {
    const { rows } = await this.db.query<RunRow>(prepared('oncely_run_summary', SUMMARY.postgres), [
      tenantId,
      runId,
    ]);
    return rows[0] === undefined ? undefined : toRunSummary(rows[0]);
  }

  async list(tenantId: string, filter: RunListFilter): Promise<RunSummary[]> {
    const { rows } = await this.db.query<RunRow>(RUNS_PAGE.postgres(tenantId, filter));
    return rows.map(toRunSummary);
  }

  async claimNext(
    owner: string,
    leaseMs: number,
    agents?: readonly string[],
  ): Promise<RunRecord | undefined> {
    const { rows } = await this.db.query<RunWithMessagesRow>(
      prepared('oncely_claim_next', CLAIM_NEXT.postgres),
      [owner, leaseMs, agents ?? null],
    );
    return rows[0] === undefined ? undefined : toRun(rows[0]);
  }

  async claim(
    tenantId: string,
    runId: string,
    owner: string,
    leaseMs: number,
    agents?: readonly string[],
  ): Promise<RunRecord | undefined> {
    const { rows } = await this.db.query<RunWithMessagesRow>(prepared('oncely_claim', CLAIM.postgres), [
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
    const result = await this.db.query(prepared('oncely_renew', RENEW.postgres), [
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
      prepared('oncely_save', SAVE.postgres),
      saveParams(request),
    );
    return rows[0] === undefined ? undefined : Number(rows[0].checkpoint_version);
  }

  async release(request: ReleaseRequest): Promise<boolean> {
    const { fence } = request;
    const result = await this.db.query(RELEASE.postgres, [
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
    const { rows } = await this.db.query<RunWithMessagesRow>(RETRY.postgres, [
      tenantId,
      runId,
      reason,
      actorId,
    ]);
    return rows[0] === undefined ? undefined : toRun(rows[0]);
  }

  async sendMessage(request: SendMessageRequest): Promise<SendMessageResult | undefined> {
    const { tenantId, runId } = request;
    const { rows } = await this.db.query<RunRow & { turn_created_at: Date | string }>(
      prepared('oncely_send_message', SEND_MESSAGE.postgres),
      [
        tenantId,
        runId,
        request.clientMessageId,
        JSON.stringify(request.message),
        request.messageDigest,
        request.reason,
        request.actorId,
      ],
    );
    const row = rows[0];
    if (row !== undefined) return sentMessage(request, row, row.turn_created_at);
    // Not sent: the id was sent before (read after the statement, so a send that raced it is seen),
    // or the run is not waiting for a message.
    const sent = await this.db.query<RunTurnRow>(TURN_BY_CLIENT_ID.postgres, [
      tenantId,
      runId,
      request.clientMessageId,
    ]);
    const run = await this.db.query<RunRow>(prepared('oncely_run_summary', SUMMARY.postgres), [
      tenantId,
      runId,
    ]);
    return unsentMessage(request, sent.rows[0], run.rows[0]);
  }

  async turns(tenantId: string, runId: string): Promise<RunTurn[]> {
    const { rows } = await this.db.query<RunTurnRow>(TURNS.postgres, [tenantId, runId]);
    return rows.map(toRunTurn);
  }

  async usage(tenantId: string, filter: UsageFilter): Promise<TenantUsage> {
    const { rows } = await this.db.query<UsageRow>(TENANT_USAGE.postgres, [
      tenantId,
      filter.from ?? null,
      filter.to ?? null,
    ]);
    return tenantUsage(rows);
  }

  async requeue(
    tenantId: string,
    runId: string,
    from: readonly RunStatus[],
    reason: string,
  ): Promise<boolean> {
    const result = await this.db.query(REQUEUE.postgres, [tenantId, runId, from, reason]);
    return result.rowCount === 1;
  }

  async cancel(
    tenantId: string,
    runId: string,
    reason: string,
    actorId: string,
  ): Promise<RunRecord | undefined> {
    const { rows } = await this.db.query<RunWithMessagesRow>(CANCEL.postgres, [
      tenantId,
      runId,
      reason,
      FINAL_RUN_STATUSES,
      actorId,
    ]);
    return rows[0] === undefined ? undefined : toRun(rows[0]);
  }

  async listWaiting(status: RunStatus, limit: number, after?: WaitingCursor): Promise<WaitingRun[]> {
    const { rows } = await this.db.query<WaitingRow>(LIST_WAITING.postgres, [
      status,
      limit,
      after?.at ?? null,
      after?.tenantId ?? null,
      after?.runId ?? null,
    ]);
    return rows.map(toWaiting);
  }

  async appendEvent(tenantId: string, runId: string, type: string, data: JsonValue): Promise<void> {
    await this.db.query(APPEND_EVENT.postgres, [tenantId, runId, type, JSON.stringify(data)]);
  }

  async events(tenantId: string, runId: string, afterSeq: number, limit: number): Promise<RunEvent[]> {
    const { rows } = await this.db.query<RunEventRow>(RUN_EVENTS.postgres, [
      tenantId,
      runId,
      afterSeq,
      limit,
    ]);
    return rows.map(toRunEvent);
  }

  async lastClaims(tenantId: string, runId: string, limit: number): Promise<RunEvent[]> {
    const { rows } = await this.db.query<RunEventRow>(LAST_CLAIMS.postgres, [tenantId, runId, limit]);
    return rows.map(toRunEvent);
  }

  async createApprovals(approvals: readonly NewApproval[]): Promise<void> {
    if (approvals.length === 0) return;
    await this.db.query(CREATE_APPROVALS.postgres, [
      approvals.map((a) => a.tenantId),
      approvals.map((a) => a.idempotencyKey),
      approvals.map((a) => a.runId),
      approvals.map((a) => a.toolName),
      approvals.map((a) => JSON.stringify(a.args)),
      approvals.map((a) => a.argsDigest),
      approvals.map((a) => a.repeatOf ?? null),
    ]);
  }

  async getApproval(tenantId: string, idempotencyKey: string): Promise<ApprovalRecord | undefined> {
    const { rows } = await this.db.query<ApprovalRow>(GET_APPROVAL.postgres, [tenantId, idempotencyKey]);
    return rows[0] === undefined ? undefined : toApproval(rows[0]);
  }

  async approvalsOfRuns(
    runs: readonly { readonly tenantId: string; readonly runId: string }[],
  ): Promise<ApprovalRecord[]> {
    if (runs.length === 0) return [];
    const { rows } = await this.db.query<ApprovalRow>(APPROVALS_OF_RUNS.postgres, [
      runs.map((r) => r.tenantId),
      runs.map((r) => r.runId),
    ]);
    return rows.map(toApproval);
  }

  async approvalsOfRun(tenantId: string, runId: string): Promise<ApprovalRecord[]> {
    const { rows } = await this.db.query<ApprovalRow>(APPROVALS_OF_RUN.postgres, [tenantId, runId]);
    return rows.map(toApproval);
  }

  async listApprovals(tenantId: string, filter: ApprovalListFilter): Promise<ApprovalRecord[]> {
    const { rows } = await this.db.query<ApprovalRow>(APPROVALS_PAGE.postgres(tenantId, filter));
    return rows.map(toApproval);
  }

  async decideApproval(
    tenantId: string,
    idempotencyKey: string,
    decision: 'approved' | 'rejected',
    actorId: string,
    reason: string | null,
  ): Promise<ApprovalRecord | undefined> {
    const { rows } = await this.db.query<ApprovalRow>(DECIDE_APPROVAL.postgres, [
      tenantId,
      idempotencyKey,
      decision,
      actorId,
      reason,
    ]);
    return rows[0] === undefined ? undefined : toApproval(rows[0]);
  }

  async consumeApproval(tenantId: string, idempotencyKey: string, argsDigest: string): Promise<boolean> {
    const result = await this.db.query(CONSUME_APPROVAL.postgres, [tenantId, idempotencyKey, argsDigest]);
    return result.rowCount === 1;
  }
}
