import { OncelyError } from '../errors/index.js';
import { assertTenantId, decideCall, parseKey, type ToolExecutionRecord } from '../ledger/index.js';
import { isFinalRunStatus, type ApprovalRecord } from '../run-state/index.js';
import type { NewApproval, StoreTx } from '../store/index.js';
import type { Ledger } from './ledger.js';
import { REASON_MAX, assertActorId, operatorReason } from './operator-input.js';
import type { PreparedCall } from './prepare.js';

/**
 * The guarded call's side of approvals, the same approve/consume-once path the run loop uses: a call
 * of a tool declared `approval: true` that has no ledger record yet runs only with an approval of its
 * exact arguments, which its reservation consumes in the same transaction. Without one, the approval
 * is asked for (an operator sees it in `oncely approvals list`) and the call is refused with
 * `APPROVAL_REQUIRED`; nothing is reserved or run.
 */
export async function approvalsToConsume(
  ledger: Ledger,
  prepared: readonly PreparedCall[],
): Promise<PreparedCall[]> {
  const needing = prepared.filter((p) => p.tool.effect.approval);
  if (needing.length === 0) return [];
  const consume: PreparedCall[] = [];
  const refused: { call: PreparedCall; approval: ApprovalRecord | undefined; action: string }[] = [];
  const asked: NewApproval[] = [];
  for (const call of needing) {
    const { tenantId, idempotencyKey } = call.request;
    const record: ToolExecutionRecord | undefined = await ledger.store.ledger.get(tenantId, idempotencyKey);
    if (record !== undefined) continue; // the record stands: replayed or settled as the table says
    const approval = await ledger.store.runs.getApproval(tenantId, idempotencyKey);
    const state =
      approval === undefined
        ? 'none'
        : approval.status === 'consumed'
          ? 'approved'
          : approval.argsDigest !== call.request.argsDigest
            ? 'rejected'
            : approval.status;
    const { action } = decideCall({
      approval: state,
      caller: 'guarded',
      hasHook: false,
      mayLand: false,
      attemptsExhausted: false,
    });
    if (action === 'reserve') consume.push(call);
    else refused.push({ call, approval, action });
    if (action === 'request_approval') asked.push(approvalOf(call));
  }
  if (asked.length > 0) await ledger.store.runs.createApprovals(asked);
  const first = refused[0];
  if (first !== undefined) throw refusal(first.call, first.approval, first.action, refused.length);
  return consume;
}

/** Consumes the call's approval inside the transaction that reserves it: an approval is used once. */
export async function consumeApproval(tx: StoreTx, call: PreparedCall): Promise<void> {
  const { tenantId, idempotencyKey, argsDigest } = call.request;
  if (await tx.runs.consumeApproval(tenantId, idempotencyKey, argsDigest)) return;
  throw new OncelyError(
    'APPROVAL_REQUIRED',
    `the approval of ${idempotencyKey} was used or withdrawn meanwhile; nothing ran. Ask again`,
    { details: { key: idempotencyKey } },
  );
}

/** The approval a call asks for: bound to its key and its arguments' digest. */
export function approvalOf(call: PreparedCall): NewApproval {
  const { request } = call;
  return {
    tenantId: request.tenantId,
    idempotencyKey: request.idempotencyKey,
    runId: request.runId,
    toolName: request.toolName,
    args: request.args,
    argsDigest: request.argsDigest,
  };
}

function refusal(
  call: PreparedCall,
  approval: ApprovalRecord | undefined,
  action: string,
  count: number,
): OncelyError {
  const key = call.request.idempotencyKey;
  const others = count > 1 ? ` (and ${count - 1} other call(s) of this batch)` : '';
  if (action === 'rejected') {
    const why =
      approval?.status === 'rejected'
        ? `an operator rejected it${approval.decidedBy === null ? '' : ` (${approval.decidedBy})`}: ${approval.reason ?? 'no reason given'}`
        : 'the approval was given for other arguments than this call has';
    return new OncelyError(
      'APPROVAL_REJECTED',
      `tool call ${key}${others} was not run: ${why}. Nothing was changed; make a new call (a new tool call id) if it is still wanted`,
      { details: { key, approval } },
    );
  }
  return new OncelyError(
    'APPROVAL_REQUIRED',
    `tool call ${key}${others} (${call.tool.name}) needs an operator's approval of these exact arguments ` +
      `before it runs, and ${action === 'request_approval' ? 'it has now been asked for' : 'it is still pending'}; ` +
      `nothing was reserved or run. Approve it with \`oncely approvals approve ${key}\` ` +
      `(POST /v1/approvals/${key}/approve), then make the same call again`,
    { details: { key, status: approval?.status ?? 'pending' } },
  );
}

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
 * together. For a guarded call (`executeToolCall`), the next call with the same key and arguments
 * then runs, consuming the approval; a run's caller resumes the run (`Runtime.approve`).
 *
 * @example
 * await decideToolApproval(ledger, 'approved', { tenantId: 'acme', idempotencyKey: 'run_1:call_1', actorId: 'ops-ana' });
 */
export async function decideToolApproval(
  ledger: Ledger,
  decision: 'approved' | 'rejected',
  input: ApprovalDecision,
): Promise<ApprovalRecord> {
  const { tenantId, key, actorId, reason } = validate(decision, input);
  return ledger.store.transaction(async (tx) => {
    const approval = await tx.runs.getApproval(tenantId, key);
    if (approval === undefined) throw notFound(key);
    const run = await tx.runs.summary(tenantId, approval.runId);
    if (run !== undefined && isFinalRunStatus(run.status)) {
      throw new OncelyError(
        'RUN_ALREADY_FINAL',
        `run ${run.runId} is ${run.status}; its approvals can no longer be decided`,
        { details: { runId: run.runId, status: run.status } },
      );
    }
    const written = await tx.runs.decideApproval(tenantId, key, decision, actorId, reason);
    if (written === undefined) throw alreadyDecided((await tx.runs.getApproval(tenantId, key)) ?? approval);
    // A guarded call's approval belongs to no run: there is no run's stream to tell.
    if (run !== undefined) {
      await tx.runs.appendEvent(tenantId, written.runId, 'approval.decided', {
        key,
        decision,
        actor: actorId,
        reason,
      });
    }
    return written;
  });
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
