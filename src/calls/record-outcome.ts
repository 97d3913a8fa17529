import { OncelyError, errorInfo } from '../errors/index.js';
import { toJsonValue, type Actor, type JsonValue, type ToolExecutionRecord } from '../ledger/index.js';
import type { LedgerStore, TransitionRequest, TransitionResult } from '../store/index.js';
import type { AttemptOutcome, LateOutcome } from './attempt.js';
import type { Ledger } from './ledger.js';
import { reportLoss } from './settlement.js';

export interface RecordPlan {
  readonly ledger: Ledger;
  readonly record: ToolExecutionRecord;
  readonly resultReference: (value: unknown) => string | null | undefined;
  /** The tool's downstream honours the idempotency key (see `TransitionRequest.keyed`). */
  readonly keyed: boolean;
  /** Runs inside the transaction that records `completed` (a compensation flips its parent there). */
  readonly onCompleted?: (tx: LedgerStore, record: ToolExecutionRecord) => Promise<void>;
}

/**
 * Records what the attempt came to, compare-and-set on the `started` record this process reserved.
 * If someone settled the call meanwhile, their decision stands and ours goes into the history as
 * ignored. An indeterminate attempt keeps listening: its late answer may still settle the call.
 */
export async function recordOutcome(plan: RecordPlan, outcome: AttemptOutcome): Promise<ToolExecutionRecord> {
  const result = await write(plan, plan.record, outcome);
  reportLoss(plan.ledger, result, reported(plan.record.attempt, outcome.kind), plan.record.attempt);
  keepListening(plan, outcome, result);
  if (result.record === undefined) throw vanished(plan.record);
  return result.record;
}

/**
 * The compare-and-set that records an attempt's outcome on the record it started from. A caller that
 * writes it inside its own transaction calls `keepListening` once that transaction has committed.
 */
export function outcomeTransition(
  actor: Actor,
  from: ToolExecutionRecord,
  outcome: AttemptOutcome | Exclude<LateOutcome, { kind: 'unknown' }>,
  resultReference: RecordPlan['resultReference'],
  keyed: boolean,
  reason?: string,
): TransitionRequest {
  const base = {
    tenantId: from.tenantId,
    idempotencyKey: from.idempotencyKey,
    via: 'outcome' as const,
    expect: { status: from.status, version: from.version },
    actor,
    // The history names the attempt that produced the outcome, not whichever attempt stands now.
    attempt: from.attempt,
    keyed,
    recordIgnored: true,
  };
  if (outcome.kind === 'failed' || outcome.kind === 'indeterminate') {
    return { ...base, to: outcome.kind, reason: reason ?? outcome.error.message, error: outcome.error };
  }
  const stored = storable(outcome.value);
  return {
    ...base,
    to: 'completed',
    reason: reason ?? null,
    result: stored.value,
    resultReference: reference(resultReference, outcome.value),
    detail: stored.problem === undefined ? null : { resultNotStored: stored.problem },
  };
}

/** After an indeterminate outcome was written: the abandoned attempt's late answer may still settle it. */
export function keepListening(plan: RecordPlan, outcome: AttemptOutcome, written: TransitionResult): void {
  if (outcome.kind !== 'indeterminate' || !written.applied) return;
  const recorded = written.record;
  plan.ledger.track(outcome.late.then((late) => recordLate(plan, recorded, late)));
}

/** How an attempt's own outcome is named in a conflict's log line. */
export function reported(attempt: number, kind: string): string {
  return `attempt ${attempt} reported it ${kind}`;
}

export function vanished(record: ToolExecutionRecord): OncelyError {
  return new OncelyError(
    'LEDGER_RECORD_NOT_FOUND',
    `tool call ${record.idempotencyKey} vanished from the ledger`,
  );
}

async function recordLate(plan: RecordPlan, record: ToolExecutionRecord, late: LateOutcome): Promise<void> {
  if (late.kind === 'unknown') return;
  try {
    const result = await write(plan, record, late, 'late outcome of the attempt that timed out');
    reportLoss(plan.ledger, result, reported(record.attempt, late.kind), record.attempt);
  } catch (error) {
    process.emitWarning(
      `oncely: could not record the late outcome of ${record.idempotencyKey}: ${errorInfo(error).message}`,
    );
  }
}

async function write(
  plan: RecordPlan,
  from: ToolExecutionRecord,
  outcome: AttemptOutcome | Exclude<LateOutcome, { kind: 'unknown' }>,
  reason?: string,
): Promise<TransitionResult> {
  const request = outcomeTransition(
    plan.ledger.actor,
    from,
    outcome,
    plan.resultReference,
    plan.keyed,
    reason,
  );
  const onCompleted = plan.onCompleted;
  if (onCompleted === undefined || request.to !== 'completed') {
    return plan.ledger.store.ledger.transition(request);
  }
  return plan.ledger.store.transaction(async (tx) => {
    const written = await tx.ledger.transition(request);
    if (written.applied) await onCompleted(tx.ledger, written.record);
    return written;
  });
}

/** The result as JSON; a value JSON cannot carry is recorded as null, with the reason in the history. */
function storable(value: unknown): { value: JsonValue | null; problem?: string } {
  if (value === undefined) return { value: null };
  try {
    return { value: toJsonValue(value) };
  } catch (error) {
    return { value: null, problem: errorInfo(error).message };
  }
}

function reference(pick: RecordPlan['resultReference'], value: unknown): string | null {
  try {
    const ref = pick(value);
    return typeof ref === 'string' ? ref : null;
  } catch {
    return null;
  }
}
