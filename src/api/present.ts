import type { z } from 'zod/v4';
import type { LedgerEvent, ToolExecutionRecord } from '../ledger/index.js';
import type { ApprovalRecord, RunEvent, RunSummary, RunTurn, RunUsage } from '../run-state/index.js';
import type { ApiKeyRecord } from '../store/index.js';
import type { apiKeySchema } from './schemas/api-keys.js';
import type { approvalSchema } from './schemas/approvals.js';
import type { runEventSchema, runSchema, turnSchema, usageSchema } from './schemas/runs.js';
import type { ledgerEventSchema, toolExecutionSchema } from './schemas/tool-executions.js';

/** Records as the API shows them: snake_case, the way every body of the API is written. */
export function toToolExecution(r: ToolExecutionRecord): z.output<typeof toolExecutionSchema> {
  return {
    tenant_id: r.tenantId,
    idempotency_key: r.idempotencyKey,
    run_id: r.runId,
    tool_call_id: r.toolCallId,
    tool_name: r.toolName,
    effect: r.effect,
    status: r.status,
    attempt: r.attempt,
    version: r.version,
    args: r.args,
    args_digest: r.argsDigest,
    result: r.result,
    result_reference: r.resultReference,
    error: r.error,
    compensation_of: r.compensationOf,
    created_at: r.createdAt,
    updated_at: r.updatedAt,
    attempt_started_at: r.attemptStartedAt,
    settled_at: r.settledAt,
    settled_by: r.settledBy,
    attempt_timeout_ms: r.attemptTimeoutMs,
    conflict_at: r.conflictAt,
  };
}

export function toLedgerEvent(e: LedgerEvent): z.output<typeof ledgerEventSchema> {
  return {
    id: e.id,
    at: e.at,
    kind: e.kind,
    actor: e.actor,
    via: e.via,
    from: e.from,
    to: e.to,
    attempt: e.attempt,
    reason: e.reason,
    detail: e.detail,
  };
}

export function toRun(r: RunSummary): z.output<typeof runSchema> {
  return {
    tenant_id: r.tenantId,
    run_id: r.runId,
    agent: r.agent,
    status: r.status,
    input: r.input,
    result: r.result,
    error: r.error,
    status_reason: r.statusReason,
    step: r.checkpoint.step,
    pending_calls: (r.checkpoint.pending?.calls ?? []).map((c) => ({
      idempotency_key: `${r.runId}:${c.toolCallId}`,
      tool_name: c.toolName,
      heard: c.heard?.kind ?? null,
    })),
    lease: { owner: r.leaseOwner, epoch: r.leaseEpoch, expires_at: r.leaseExpiresAt },
    checkpoint_version: r.checkpointVersion,
    drive_attempts: r.driveAttempts,
    model_outages: r.modelOutages,
    last_error: r.lastError,
    turn: r.turn,
    usage: toUsage(r.usage),
    token_budget: r.tokenBudget,
    created_at: r.createdAt,
    updated_at: r.updatedAt,
  };
}

export function toUsage(u: RunUsage): z.output<typeof usageSchema> {
  return {
    input_tokens: u.inputTokens,
    output_tokens: u.outputTokens,
    reasoning_tokens: u.reasoningTokens,
    cached_input_tokens: u.cachedInputTokens,
    total_tokens: u.totalTokens,
  };
}

export function toTurn(t: RunTurn): z.output<typeof turnSchema> {
  return {
    turn: t.turn,
    client_message_id: t.clientMessageId,
    message_index: t.messageIndex,
    actor_id: t.actorId,
    created_at: t.createdAt,
  };
}

export function toRunEvent(e: RunEvent): z.output<typeof runEventSchema> {
  return { id: e.seq, at: e.at, type: e.type, data: e.data };
}

/**
 * An approval with the earlier call it repeats (`earlier`: that call's record as read now, or
 * undefined when there is none or it is not in the ledger).
 */
export function toApproval(
  a: ApprovalRecord,
  earlier: ToolExecutionRecord | undefined,
): z.output<typeof approvalSchema> {
  const repeated = a.repeatOf === null || earlier === undefined ? null : toToolExecution(earlier);
  return { ...toApprovalFields(a), earlier: repeated };
}

/** An approval's own fields, without reading the earlier call (an error answer shows these). */
export function toApprovalFields(a: ApprovalRecord): Omit<z.output<typeof approvalSchema>, 'earlier'> {
  return {
    tenant_id: a.tenantId,
    idempotency_key: a.idempotencyKey,
    run_id: a.runId,
    tool_name: a.toolName,
    args: a.args,
    args_digest: a.argsDigest,
    repeat_of: a.repeatOf,
    status: a.status,
    decided_by: a.decidedBy,
    reason: a.reason,
    created_at: a.createdAt,
    decided_at: a.decidedAt,
    consumed_at: a.consumedAt,
  };
}

export function toApiKey(k: ApiKeyRecord): z.output<typeof apiKeySchema> {
  return {
    key_id: k.keyId,
    tenant_id: k.tenantId,
    actor_id: k.actorId,
    role: k.role,
    created_at: k.createdAt,
    created_by: k.createdBy,
    revoked_at: k.revokedAt,
    revoked_by: k.revokedBy,
  };
}
