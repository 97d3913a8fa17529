import { REASON_MAX, assertActorId, operatorReason, type Ledger } from '../calls/index.js';
import { OncelyError } from '../errors/index.js';
import { assertTenantId, parseKey } from '../ledger/index.js';
import { isFinalRunStatus, type ApprovalRecord } from '../run-state/index.js';
import { resumeIfReady } from './resume.js';

export interface ApprovalDecision {
  readonly tenantId: string;
  /** The key of the call waiting for approval, `<run_id>:<tool_call_id>`. */
  readonly idempotencyKey: string;
  /** The operator deciding; recorded on the approval. */
  readonly actorId: string;
  /** Required to reject: the model hears it. Optional to approve. */
  readonly reason?: string;
}

/**
 * Approves or rejects a call waiting for approval, compare-and-set: of two operators deciding at once
 * exactly one wins; the other gets `APPROVAL_ALREADY_DECIDED`. The decision and its event commit
 * together, and a run with nothing else to wait for goes back to the queue.
 */
export async function decideApproval(
  ledger: Ledger,
  decision: 'approved' | 'rejected',
  input: ApprovalDecision,
): Promise<ApprovalRecord> {
  const { tenantId, key, actorId, reason } = validate(decision, input);
  const decided = await ledger.store.transaction(async (tx) => {
    const approval = await tx.runs.getApproval(tenantId, key);
    if (approval === undefined) throw notFound(key);
    const run = await tx.runs.get(tenantId, approval.runId);
    if (run !== undefined && isFinalRunStatus(run.status)) {
      throw new OncelyError(
        'RUN_ALREADY_FINAL',
        `run ${run.runId} is ${run.status}; its approvals can no longer be decided`,
        { details: { runId: run.runId, status: run.status } },
      );
    }
    const written = await tx.runs.decideApproval(tenantId, key, decision, actorId, reason);
    if (written === undefined) throw alreadyDecided((await tx.runs.getApproval(tenantId, key)) ?? approval);
    await tx.runs.appendEvent(tenantId, written.runId, 'approval.decided', {
      key,
      decision,
      actor: actorId,
      reason,
    });
    return written;
  });
  await resumeIfReady(ledger, tenantId, decided.runId);
  return decided;
}

function validate(
  decision: 'approved' | 'rejected',
  input: ApprovalDecision,
): { tenantId: string; key: string; actorId: string; reason: string | null } {
  assertTenantId(input.tenantId);
  const parsed = parseKey(input.idempotencyKey);
  if (parsed.compensationOf !== null) throw notFound(input.idempotencyKey);
  assertActorId(input.actorId, 'a decision');
  const reason =
    decision === 'rejected'
      ? operatorReason(
          input.reason,
          `a rejection needs a reason (1-${REASON_MAX} characters): the model hears it`,
        )
      : input.reason === undefined
        ? undefined
        : operatorReason(input.reason, `a reason, when given, is 1-${REASON_MAX} characters`);
  return {
    tenantId: input.tenantId,
    key: input.idempotencyKey,
    actorId: input.actorId,
    reason: reason ?? null,
  };
}

function notFound(key: string): OncelyError {
  return new OncelyError('APPROVAL_NOT_FOUND', `no approval is asked for ${key} in this tenant`, {
    details: { key },
  });
}

function alreadyDecided(approval: ApprovalRecord): OncelyError {
  return new OncelyError(
    'APPROVAL_ALREADY_DECIDED',
    `the approval of ${approval.idempotencyKey} is already ${approval.status}` +
      (approval.decidedBy === null ? '' : ` (by ${approval.decidedBy})`) +
      '; nothing was changed',
    { details: { approval } },
  );
}
