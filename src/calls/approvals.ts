import { OncelyError } from '../errors/index.js';
import {
  DEFAULT_REPEAT_POLICY,
  assertTenantId,
  decideCall,
  parseKey,
  type RepeatPolicy,
} from '../ledger/index.js';
import { isFinalRunStatus, type ApprovalRecord } from '../run-state/index.js';
import type { InlineRepeatScope, NewApproval, StoreTx } from '../store/index.js';
import type { Ledger } from './ledger.js';
import { REASON_MAX, assertActorId, operatorReason } from './operator-input.js';
import type { PreparedCall } from './prepare.js';
import { findRepeats, windowedCall, type FoundRepeat, type WindowedCall } from './repeats.js';

/**
 * The guarded call's gate before anything is reserved, the same decision table the run loop asks:
 * approvals (a call of a tool declared `approval: true` that has no ledger record yet runs only with
 * an approval of its exact arguments, which its reservation consumes in the same transaction) and
 * repeats (a call whose tool and identity equal an earlier call of its conversation or run that took
 * effect or may have). A call that may not run yet refuses the whole batch, nothing reserved or run:
 * `APPROVAL_REQUIRED` (the approval is asked for; an operator sees it in `oncely approvals list`,
 * as a repeat when it is one), `APPROVAL_REJECTED`, or `TOOL_CALL_REPEAT` (refused under `refuse`, or
 * waiting for an earlier identical call whose outcome is unknown). Returns the calls whose approval
 * the reservation consumes.
 */
export async function approvalsToConsume(
  ledger: Ledger,
  prepared: readonly PreparedCall[],
  onRepeat?: RepeatPolicy,
): Promise<Gated> {
  const policyOf = guardedPolicy(onRepeat);
  const needing = prepared.filter((p) => p.tool.effect.approval || policyOf(p) !== 'allow');
  if (needing.length === 0) return { consume: [], windowed: [] };
  const tenantId = needing[0]!.request.tenantId;
  const windowed: WindowedCall[] = [];
  const maybeWindowed = (call: PreparedCall): void => {
    const w = windowedCall(call, policyOf(call));
    if (w !== undefined) windowed.push(w);
  };
  const repeats = await findRepeats(
    {
      ledger,
      tenantId,
      scopeOf: guardedScope,
      policyOf,
    },
    needing,
  );
  const consume: PreparedCall[] = [];
  const refused: Refused[] = [];
  const asked: NewApproval[] = [];
  for (const call of needing) {
    const { idempotencyKey } = call.request;
    const repeat = repeats.of(call);
    // Most calls need no approval and repeat nothing: nothing more is read for them.
    if (!call.tool.effect.approval && repeat === undefined) {
      repeats.made(call);
      maybeWindowed(call);
      continue;
    }
    // A call with a record stands: it is replayed or settled as the table says, never gated again.
    if ((await ledger.store.ledger.get(tenantId, idempotencyKey)) !== undefined) continue;
    const approval = await ledger.store.runs.getApproval(tenantId, idempotencyKey);
    const { action } = decideCall({
      approval: approvalState(call, approval),
      caller: 'guarded',
      hasHook: false,
      mayLand: false,
      attemptsExhausted: false,
      ...(repeat === undefined ? {} : { repeat: { earlier: repeat.state, policy: repeat.policy } }),
    });
    if (action === 'reserve') {
      repeats.made(call);
      if (approval !== undefined) consume.push(call);
      if (repeat === undefined) maybeWindowed(call);
      continue;
    }
    if (action !== 'rejected' && action !== 'refuse_repeat') repeats.made(call);
    refused.push({ call, approval, action, repeat });
    if (action === 'request_approval') {
      asked.push({ ...approvalOf(call), repeatOf: repeat?.earlierKey ?? null });
    }
  }
  if (asked.length > 0) await ledger.store.runs.createApprovals(asked);
  const first = refused[0];
  if (first !== undefined) throw refusal(first, refused.length);
  return { consume, windowed };
}

/**
 * The scope a guarded call's reservation checks for repeats itself (`reserveUnlessRepeat`), where the
 * gate would read nothing but its repeats: one call, of a tool that needs no approval, guarding its
 * repeats (policy other than `allow`) in its run or conversation, not across the tenant (a window is
 * checked again under a lock). Undefined: the gate runs first, as for every other batch.
 */
export function inlineRepeatScope(
  prepared: readonly PreparedCall[],
  onRepeat: RepeatPolicy | undefined,
): InlineRepeatScope | undefined {
  const [call] = prepared;
  if (call === undefined || prepared.length !== 1) return undefined;
  const { tool, request } = call;
  if (tool.effect.kind === 'read' || tool.effect.approval || tool.repeatWindowMs !== undefined)
    return undefined;
  if (guardedPolicy(onRepeat)(call) === 'allow' || request.repeatDigest == null) return undefined;
  return guardedScope(call);
}

/**
 * A guarded call whose key is `failed` (its hook found it not taken) is made again and re-opened
 * under its key; as the run loop does, it is not re-opened when an identical call of its scope took
 * effect meanwhile or may have (a second effect), unless its approval was given as a repeat or its
 * policy is `allow`. Throws `TOOL_CALL_REPEAT`: refused while that call stands, waiting while its
 * outcome is unknown. Nothing is written.
 */
export async function assertReopenRepeatsNothing(
  ledger: Ledger,
  call: PreparedCall,
  onRepeat: RepeatPolicy | undefined,
): Promise<void> {
  const { tool, request } = call;
  const policyOf = guardedPolicy(onRepeat);
  if (request.repeatDigest == null || policyOf(call) === 'allow') return;
  const approval = await ledger.store.runs.getApproval(request.tenantId, request.idempotencyKey);
  if (approval?.repeatOf != null) return;
  const repeats = await findRepeats(
    {
      ledger,
      tenantId: request.tenantId,
      scopeOf: guardedScope,
      policyOf,
    },
    [call],
  );
  const repeat = repeats.of(call);
  if (repeat === undefined) return;
  const key = request.idempotencyKey;
  const details = { key, repeatOf: repeat.earlierKey, waiting: repeat.state === 'unknown', reopen: true };
  throw new OncelyError(
    'TOOL_CALL_REPEAT',
    repeat.state === 'unknown'
      ? `tool call ${key} (${tool.name}) failed and would be run again, but an identical call, ${repeat.earlierKey}, ` +
          'has an outcome not known yet; nothing was run. Make the same call again once that call is settled: ' +
          'it is then treated by what that call came to'
      : `tool call ${key} (${tool.name}) failed and was not run again: an identical call, ${repeat.earlierKey}, ` +
          'took effect since, so running it would be a second effect. Nothing was changed; an operator can make ' +
          'a second one',
    { details },
  );
}

/** Nothing to consume or check again: the gate had nothing to say. */
export const NOT_GATED: Gated = { consume: [], windowed: [] };

/** A guarded call's repeat policy: the call's option, else its tool's, else `ask`; a read's is `allow`. */
function guardedPolicy(onRepeat: RepeatPolicy | undefined): (call: PreparedCall) => RepeatPolicy {
  return (call) =>
    call.tool.effect.kind === 'read' ? 'allow' : (onRepeat ?? call.tool.onRepeat ?? DEFAULT_REPEAT_POLICY);
}

/** A guarded call's repeat scope: its conversation when its caller named one, else its run. */
function guardedScope(call: PreparedCall): InlineRepeatScope {
  const { conversationId, runId } = call.request;
  return conversationId == null ? { kind: 'run', runId } : { kind: 'conversation', conversationId };
}

/** What may go ahead: the calls whose approval the reservation consumes, and the windowed calls to check again. */
export interface Gated {
  readonly consume: readonly PreparedCall[];
  /** Calls that repeat nothing under a tenant-wide window: checked again as they are reserved. */
  readonly windowed: readonly WindowedCall[];
}

interface Refused {
  readonly call: PreparedCall;
  readonly approval: ApprovalRecord | undefined;
  readonly action: string;
  readonly repeat: FoundRepeat | undefined;
}

function approvalState(
  call: PreparedCall,
  approval: ApprovalRecord | undefined,
): 'not_needed' | 'none' | 'pending' | 'approved' | 'rejected' {
  if (approval === undefined) return call.tool.effect.approval ? 'none' : 'not_needed';
  if (approval.status === 'consumed') return 'approved';
  if (approval.argsDigest !== call.request.argsDigest) return 'rejected';
  return approval.status;
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

function refusal(refused: Refused, count: number): OncelyError {
  const { call, approval, action, repeat } = refused;
  const key = call.request.idempotencyKey;
  const others = count > 1 ? ` (and ${count - 1} other call(s) of this batch)` : '';
  if (action === 'refuse_repeat' || action === 'await_earlier') return repeatRefusal(refused, others);
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
  const what =
    repeat === undefined
      ? "needs an operator's approval of these exact arguments"
      : `repeats tool call ${repeat.earlierKey}, which took effect, so it needs an operator's approval`;
  return new OncelyError(
    'APPROVAL_REQUIRED',
    `tool call ${key}${others} (${call.tool.name}) ${what} before it runs, and ` +
      `${action === 'request_approval' ? 'it has now been asked for' : 'it is still pending'}; ` +
      `nothing was reserved or run. Approve it with \`oncely approvals approve ${key}\` ` +
      `(POST /v1/approvals/${key}/approve), then make the same call again`,
    { details: { key, status: approval?.status ?? 'pending', repeatOf: repeat?.earlierKey ?? null } },
  );
}

/** A repeat refused (`refuse`), or waiting for the earlier call it repeats to be settled. */
function repeatRefusal({ call, action, repeat }: Refused, others: string): OncelyError {
  const key = call.request.idempotencyKey;
  const earlier = repeat?.earlier;
  const details = {
    key,
    repeatOf: repeat?.earlierKey ?? null,
    earlier:
      earlier === undefined
        ? null
        : {
            status: earlier.status,
            result: earlier.result,
            resultReference: earlier.resultReference,
            conflict: earlier.conflictAt !== null,
          },
  };
  if (action === 'await_earlier' && earlier === undefined) {
    return new OncelyError(
      'TOOL_CALL_REPEAT',
      `tool call ${key}${others} (${call.tool.name}) repeats tool call ${repeat?.earlierKey ?? '?'} of the same ` +
        'batch; nothing was reserved or run. Make that call first, then this one in a batch of its own: it is ' +
        'then treated by what the first came to',
      { details: { ...details, waiting: true } },
    );
  }
  if (action === 'await_earlier') {
    return new OncelyError(
      'TOOL_CALL_REPEAT',
      `tool call ${key}${others} (${call.tool.name}) repeats tool call ${repeat?.earlierKey ?? '?'}, whose outcome is ` +
        'not known yet; nothing was reserved or run. Make the same call again once that call is settled ' +
        '(by its reconcile hook, or `oncely executions resolve`): it is then treated by what that call came to',
      { details: { ...details, waiting: true } },
    );
  }
  return new OncelyError(
    'TOOL_CALL_REPEAT',
    `tool call ${key}${others} (${call.tool.name}) was not run: it repeats tool call ${repeat?.earlierKey ?? '?'}, ` +
      `which ${earlier?.status === 'compensated' ? 'took effect and was compensated' : 'took effect'}, and repeats ` +
      'of this tool are refused. Nothing was changed; an operator can make a second one',
    { details: { ...details, waiting: false } },
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
