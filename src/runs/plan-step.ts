import { isOncelyError } from '../errors/index.js';
import {
  approvalOf,
  findRepeats,
  windowedCall,
  type Repeats,
  type WindowedCall,
  outcomeOfRecord,
  prepareCall,
  type Ledger,
  type PreparedCall,
  type ToolCallOutcome,
} from '../calls/index.js';
import { decideCall, isUnknownStatus, type CallFacts, type ToolExecutionRecord } from '../ledger/index.js';
import { repeatPolicyOf, type Agent } from '../agents/index.js';
import type { ApprovalRecord, HeardResult, PendingCall } from '../run-state/index.js';
import type { NewApproval } from '../store/index.js';
import type { Tool } from '../tools/index.js';
import {
  heardInvalidCall,
  heardOfRecorded,
  heardOfRejection,
  heardRejected,
  heardRepeatRefused,
} from './heard.js';

/** What the calls of a step need before any of them is reserved. */
export interface StepPlan {
  /** Calls settled without running anything now: invalid, rejected, settled meanwhile. */
  readonly heard: ReadonlyMap<string, HeardResult>;
  /** Calls to reserve together (a new call runs; an existing record is replayed or reconciled). */
  readonly ready: readonly PreparedCall[];
  /** Of `ready`, the approved calls whose approval the reservation consumes. */
  readonly consume: readonly PreparedCall[];
  /** Approvals to ask for, written with the checkpoint that puts the run in `awaiting_approval`. */
  readonly newApprovals: readonly NewApproval[];
  /** Calls waiting for an operator's decision. */
  readonly awaiting: ReadonlySet<string>;
  /**
   * Unknown calls that can no longer be made as given (their tool was renamed or its schema changed
   * since they were reserved): they stay unknown, to be settled by an operator.
   */
  readonly standing: ReadonlyMap<string, ToolCallOutcome>;
  /**
   * Repeats that wait for the earlier call they repeat to be settled (its outcome is unknown, or it
   * is a call of this same step not made yet): by call id, the earlier call's key.
   */
  readonly deferred: ReadonlyMap<string, string>;
  /** Of `deferred`, the ones whose earlier call is in this step and is being made now. */
  readonly deferredInStep: ReadonlySet<string>;
  /**
   * Of `ready`, the calls planned as no repeat under a tenant-wide window (`repeatWindowMs`): the
   * check is made again in the reservation's transaction, under a lock, as another run may be
   * reserving the same effect at this moment.
   */
  readonly windowed: readonly WindowedCall[];
  /** Repeats found this pass, by call id: the earlier key and what the table decided (for events). */
  readonly repeats: ReadonlyMap<string, { readonly of: string; readonly decision: RepeatDecision }>;
}

/**
 * What became of a repeat: an approval asked for, refused, waiting for the earlier call, or (its
 * approval decided) approved or rejected.
 */
export type RepeatDecision = 'ask' | 'refuse' | 'wait' | 'approved' | 'rejected';

export interface PlanContext {
  readonly ledger: Ledger;
  readonly tenantId: string;
  readonly runId: string;
  readonly tools: ReadonlyMap<string, Tool>;
  /**
   * True when this process wrote the pending calls a moment ago: no ledger record or approval can
   * exist for their fresh ids, so nothing is read.
   */
  readonly fresh: boolean;
  /** The agent's repeat policies (`toolPolicy.onRepeat`). */
  readonly onRepeat: Agent['toolPolicy']['onRepeat'];
}

/**
 * Sorts the unsettled calls of a step. On a resumed run, the ledger and the approvals say where each
 * call stands: a call settled meanwhile (an operator's `failed`, a compensation) is told as such; a
 * record that stands is replayed or reconciled; an approval call waits, is rejected, or is consumed.
 */
export async function planStep(context: PlanContext, calls: readonly PendingCall[]): Promise<StepPlan> {
  const heard = new Map<string, HeardResult>();
  const ready: PreparedCall[] = [];
  const consume: PreparedCall[] = [];
  const newApprovals: NewApproval[] = [];
  const awaiting = new Set<string>();
  const standing = new Map<string, ToolCallOutcome>();
  const records = context.fresh ? new Map<string, ToolExecutionRecord>() : await readRecords(context, calls);
  const approvals = context.fresh ? new Map<string, ApprovalRecord>() : await readApprovals(context, calls);
  const deferred = new Map<string, string>();
  const deferredInStep = new Set<string>();
  const found = new Map<string, { of: string; decision: RepeatDecision }>();
  const windowed: WindowedCall[] = [];
  const preparedOf = new Map(
    calls.filter((c) => c.heard === undefined).map((c) => [c.toolCallId, prepare(context, c)] as const),
  );
  const repeats: Repeats = await findRepeats(
    {
      ledger: context.ledger,
      tenantId: context.tenantId,
      scopeOf: () => ({ kind: 'run', runId: context.runId }),
      policyOf: (call) => repeatPolicyOf(context.onRepeat, call.tool),
    },
    calls.flatMap((c) => {
      const p = preparedOf.get(c.toolCallId);
      if (p === undefined || 'invalid' in p) return [];
      const record = records.get(c.toolCallId);
      return record === undefined || reopens(record, approvals.get(c.toolCallId)) ? [p] : [];
    }),
  );

  for (const call of calls) {
    const id = call.toolCallId;
    if (call.heard !== undefined) {
      const now = records.get(id);
      // Settled otherwise since, while the step waited: a call told completed was undone, or one told
      // "did not take effect" landed after all (a conflict). The model hears the truth.
      if (now !== undefined && changedSince(call.heard, now)) {
        const told = await heardOfRecorded(context.ledger.store.ledger, outcomeOfRecord(now));
        if (told !== undefined) heard.set(id, told);
      }
      continue;
    }
    const prepared = preparedOf.get(id)!;
    const record = records.get(id);
    if (record !== undefined && ('invalid' in prepared || !sameCall(prepared, record))) {
      // A deploy since changed the tool (renamed, or its schema parses the input otherwise): the call
      // as it was made stands in the ledger. The model hears what it came to — never "nothing was
      // changed" about a call that took effect or may have — and it is not run again as another call.
      const told = await recordedHeard(context, record);
      if (told !== undefined) heard.set(id, told);
      else standing.set(id, outcomeOfRecord(record));
      continue;
    }
    if ('invalid' in prepared) {
      heard.set(id, heardInvalidCall(prepared.invalid));
      continue;
    }
    if (record !== undefined) {
      const settled = await settledMeanwhile(context, record);
      if (settled !== undefined) {
        heard.set(id, settled);
        continue;
      }
      // A call the hook found not taken is run again under its key: a second effect if an identical
      // call of its scope took effect meanwhile (another run's, under a tenant window). It is not
      // run: the model hears that one; while that one is unknown, it waits for it.
      const repeat = reopens(record, approvals.get(id)) ? repeats.of(prepared) : undefined;
      if (repeat?.state === 'standing') {
        heard.set(id, heardRepeatRefused(repeat.earlier!));
        found.set(id, { of: repeat.earlierKey, decision: 'refuse' });
      } else if (repeat !== undefined) {
        deferred.set(id, repeat.earlierKey);
        if (repeat.earlier === undefined) deferredInStep.add(id);
        found.set(id, { of: repeat.earlierKey, decision: 'wait' });
      } else {
        ready.push(prepared);
        repeats.made(prepared);
        // Re-opened now, or once its hook finds it not taken (in this pass): checked again as it is.
        const mayReopen = reopens(record, approvals.get(id)) || isUnknownStatus(record.status);
        const w = windowedCall(prepared, repeatPolicyOf(context.onRepeat, prepared.tool), true);
        if (mayReopen && approvals.get(id)?.repeatOf == null && w !== undefined) windowed.push(w);
      }
      continue;
    }
    const approval = approvals.get(id);
    const repeat = repeats.of(prepared);
    const { action } = decideCall(newCallFacts(prepared, approval, repeat));
    const decision = repeat === undefined ? undefined : repeatDecision(action);
    if (decision !== undefined) found.set(id, { of: repeat!.earlierKey, decision });
    switch (action) {
      case 'reserve':
        ready.push(prepared);
        repeats.made(prepared);
        if (repeat === undefined) {
          const w = windowedCall(prepared, repeatPolicyOf(context.onRepeat, prepared.tool));
          if (w !== undefined) windowed.push(w);
        }
        if (approval !== undefined) consume.push(prepared);
        break;
      case 'request_approval':
        newApprovals.push({ ...approvalOf(prepared), repeatOf: repeat?.earlierKey ?? null });
        awaiting.add(id);
        repeats.made(prepared);
        break;
      case 'await_approval':
        awaiting.add(id);
        repeats.made(prepared);
        break;
      case 'rejected':
        heard.set(
          id,
          approval?.status === 'rejected'
            ? heardOfRejection(approval)
            : heardRejected('the approval was given for other arguments than this call has'),
        );
        break;
      case 'refuse_repeat':
        heard.set(id, heardRepeatRefused(repeat!.earlier!));
        break;
      case 'await_earlier':
        deferred.set(id, repeat!.earlierKey);
        if (repeat!.earlier === undefined) deferredInStep.add(id);
        repeats.made(prepared);
        break;
      default:
        throw new Error(`decision "${action}" for ${prepared.request.idempotencyKey}, which has no record`);
    }
  }
  return {
    heard,
    ready,
    consume,
    newApprovals,
    awaiting,
    standing,
    deferred,
    deferredInStep,
    windowed,
    repeats: found,
  };
}

/**
 * A record the table would run again (re-open): `failed` on the reconcile hook's word, no conflict,
 * and not approved as a repeat (an operator's approval of a repeat stands for its every attempt).
 */
function reopens(record: ToolExecutionRecord, approval: ApprovalRecord | undefined): boolean {
  return (
    record.status === 'failed' &&
    record.settledBy?.kind === 'reconcile' &&
    record.conflictAt === null &&
    approval?.repeatOf == null
  );
}

/** The decision table's facts about a call with no record: its approval, and what it repeats. */
function newCallFacts(
  prepared: PreparedCall,
  approval: ApprovalRecord | undefined,
  repeat: ReturnType<Repeats['of']>,
): CallFacts {
  return {
    approval: approvalState(prepared, approval),
    caller: 'run',
    hasHook: false,
    mayLand: false,
    attemptsExhausted: false,
    ...(repeat === undefined ? {} : { repeat: { earlier: repeat.state, policy: repeat.policy } }),
  };
}

function approvalState(prepared: PreparedCall, approval: ApprovalRecord | undefined): CallFacts['approval'] {
  if (approval === undefined) return prepared.tool.effect.approval ? 'none' : 'not_needed';
  if (approval.status === 'pending') return 'pending';
  if (approval.status === 'rejected' || approval.argsDigest !== prepared.request.argsDigest)
    return 'rejected';
  if (approval.status === 'approved') return 'approved';
  // Consumed, yet no record: consumption and reservation commit together, so this cannot be.
  throw new Error(`approval of ${approval.idempotencyKey} was consumed but the call has no record`);
}

/** What the table's action says of a repeat; undefined when nothing new was decided (still pending). */
function repeatDecision(action: string): RepeatDecision | undefined {
  switch (action) {
    case 'refuse_repeat':
      return 'refuse';
    case 'await_earlier':
      return 'wait';
    case 'request_approval':
      return 'ask';
    case 'reserve':
      return 'approved';
    case 'rejected':
      return 'rejected';
    default:
      return undefined;
  }
}

function prepare(context: PlanContext, call: PendingCall): PreparedCall | { invalid: string } {
  if (call.problem !== undefined) return { invalid: call.problem };
  const tool = context.tools.get(call.toolName);
  if (tool === undefined) {
    const names = [...context.tools.keys()];
    return {
      invalid: `there is no tool named "${call.toolName}"; the tools are: ${names.length > 0 ? names.join(', ') : '(none)'}`,
    };
  }
  try {
    return prepareCall({
      tenantId: context.tenantId,
      runId: context.runId,
      toolCallId: call.toolCallId,
      tool,
      args: call.input,
    });
  } catch (error) {
    if (isOncelyError(error, 'TOOL_ARGS_INVALID')) return { invalid: error.message };
    throw error;
  }
}

/** Whether what a call's step was told no longer stands: undone since, or landed after all. */
function changedSince(told: HeardResult, now: ToolExecutionRecord): boolean {
  if (now.status === 'compensated') return told.kind !== 'compensated';
  return told.kind === 'did_not_take_effect' && now.status === 'failed' && now.conflictAt !== null;
}

/**
 * A record settled while the run was not looking, told as it stands (with the operator's reason and
 * reference, from its history). `undefined`: it goes through the reservation (a completed call is
 * replayed, an unknown one reconciled, and a call the reconcile hook found not taken runs again with
 * the same key).
 */
async function settledMeanwhile(
  context: PlanContext,
  record: ToolExecutionRecord,
): Promise<HeardResult | undefined> {
  // A completion an operator recorded goes through the reservation like any completed call (it is
  // replayed, and traced so); it is told with the operator's reason there (`withRecordedReasons`).
  const settled =
    record.status === 'compensated' || (record.status === 'failed' && record.settledBy?.kind !== 'reconcile');
  if (!settled) return undefined;
  return heardOfRecorded(context.ledger.store.ledger, outcomeOfRecord(record));
}

function sameCall(call: PreparedCall, record: ToolExecutionRecord): boolean {
  return record.argsDigest === call.request.argsDigest && record.toolName === call.request.toolName;
}

/** A record told as it stands; undefined while it is unknown. */
function recordedHeard(context: PlanContext, record: ToolExecutionRecord): Promise<HeardResult | undefined> {
  return heardOfRecorded(context.ledger.store.ledger, outcomeOfRecord(record));
}

async function readRecords(
  context: PlanContext,
  calls: readonly PendingCall[],
): Promise<Map<string, ToolExecutionRecord>> {
  const records = new Map<string, ToolExecutionRecord>();
  const wanted = calls.filter(
    (c) =>
      c.heard === undefined ||
      c.heard.kind === 'completed' ||
      c.heard.kind === 'replayed' ||
      c.heard.kind === 'did_not_take_effect',
  );
  const found = await Promise.all(
    wanted.map((c) => context.ledger.store.ledger.get(context.tenantId, `${context.runId}:${c.toolCallId}`)),
  );
  wanted.forEach((c, i) => {
    const record = found[i];
    if (record !== undefined) records.set(c.toolCallId, record);
  });
  return records;
}

async function readApprovals(
  context: PlanContext,
  calls: readonly PendingCall[],
): Promise<Map<string, ApprovalRecord>> {
  // A tool's own approval, or a repeat's (asked for a call of any tool that changes something).
  const needed = calls.some((c) => {
    const tool = c.heard === undefined ? context.tools.get(c.toolName) : undefined;
    return tool !== undefined && tool.effect.kind !== 'read';
  });
  if (!needed) return new Map();
  const approvals = await context.ledger.store.runs.approvalsOfRun(context.tenantId, context.runId);
  const prefix = `${context.runId}:`;
  return new Map(approvals.map((a) => [a.idempotencyKey.slice(prefix.length), a]));
}
