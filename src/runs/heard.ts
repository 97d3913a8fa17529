import type { ToolCallOutcome } from '../calls/index.js';
import { isOncelyError } from '../errors/index.js';
import type { Actor, JsonValue, LedgerEvent, ToolExecutionRecord } from '../ledger/index.js';
import type { ApprovalRecord, HeardResult } from '../run-state/index.js';
import type { LedgerStore } from '../store/index.js';

/*
 * What the model hears about a settled call: one tool result each, in the exact words below
 * (docs/runs.md shows them). The model is never told "failed" while the truth is "unknown": an
 * unknown call is not told at all; the run waits for it to be settled, or fails.
 */

export const NOTES = {
  replayed: 'This call had already taken effect; this is its recorded result. It was not run again.',
  notAttempted:
    'The tool refused before sending anything, so this call did not take effect. It is safe to call again once the cause is fixed.',
  didNotTakeEffect: 'This call did not take effect: nothing was changed.',
  compensated:
    'This call took effect, and was then undone by an operator (compensated). Its effect no longer stands.',
  rejected: 'An operator rejected this call at approval, so it was not run and nothing was changed.',
  invalidCall: 'This call was not run: it could not be made as given. Nothing was changed.',
  readFailed: 'This lookup failed on every try. It changed nothing.',
  settledCompleted:
    'An operator checked the downstream system and settled this call: it took effect. Do not make it again.',
  repeatRefused:
    'This call was not run: an identical call (the same tool, the same effect) was already made and took effect, or may have; it is shown as `earlier`. Making it again would do it twice. Do not retry it. If the user really wants it done a second time, tell them it was refused as a repeat of that call; an operator can make a second one.',
  tookEffect:
    'Correction: this call was settled as not taken effect, but its effect then landed. It did take effect. Do not make it again.',
} as const;

/** What a completed record says beyond its result: who settled it, and the downstream reference. */
type CompletedFacts = Pick<ToolExecutionRecord, 'result' | 'resultReference' | 'settledBy'>;

/**
 * A completed call as the model hears it, the one rendering of a completion whoever settled it (its
 * own attempt, the reconcile hook, an operator): the recorded result; with the downstream reference
 * (`result_reference`) when the hook or an operator established it; and, when an operator settled it,
 * who and their reason. Never a bare `null`: an operator usually has a reference, not a result.
 */
export function heardCompleted(record: CompletedFacts, reason: string | null = null): HeardResult {
  const by = record.settledBy?.kind ?? 'runtime';
  const reference: { [key: string]: JsonValue } =
    by !== 'runtime' && record.resultReference !== null ? { result_reference: record.resultReference } : {};
  if (by !== 'operator') {
    return {
      kind: 'completed',
      type: 'json',
      value: { status: 'completed', result: record.result, ...reference },
    };
  }
  return {
    kind: 'completed',
    type: 'json',
    value: {
      status: 'completed',
      result: record.result,
      ...reference,
      settled_by: describeActor(record.settledBy!),
      ...(reason === null ? {} : { reason }),
      note: NOTES.settledCompleted,
    },
  };
}

/**
 * Whether a completed record is told as the tool's own result (a team's own loop hands the model the
 * value as it is): its own attempt's result, or one the reconcile hook found with nothing more to say.
 * A settlement with a reference or by an operator is told in words (`heardCompleted`).
 */
export function toldAsResult(record: CompletedFacts): boolean {
  const by = record.settledBy?.kind ?? 'runtime';
  return (
    by === 'runtime' || (by === 'reconcile' && record.resultReference === null && record.result !== null)
  );
}

/** What landed on a settled record, as its `conflict` event in the history recorded it. */
export interface Landed {
  readonly result: JsonValue | null;
  readonly resultReference: string | null;
}

/**
 * A call the model was (or would be) told did not take effect, whose effect then landed (a conflict):
 * it did take effect. Told in place of "did not take effect" while its step waits, and as a
 * correction at the model's next step once it was told.
 */
export function heardTookEffect(
  record: Pick<ToolExecutionRecord, 'settledBy' | 'error'>,
  landed: Landed | null,
): HeardResult {
  return {
    kind: 'took_effect',
    type: 'json',
    value: {
      status: 'took_effect',
      ...(landed === null ? {} : { result: landed.result }),
      ...(landed?.resultReference == null ? {} : { result_reference: landed.resultReference }),
      settled_by: record.settledBy === null ? 'unknown' : describeActor(record.settledBy),
      reason: record.error?.message ?? null,
      note: NOTES.tookEffect,
    },
  };
}

/** Took effect before a restart: the recorded result, not a second run. */
export function heardReplayed(result: JsonValue | null): HeardResult {
  return {
    kind: 'replayed',
    type: 'json',
    value: { status: 'completed', result, note: NOTES.replayed },
  };
}

export function heardNotAttempted(error: string): HeardResult {
  return {
    kind: 'not_attempted',
    type: 'error-json',
    value: { status: 'not_attempted', error, note: NOTES.notAttempted },
  };
}

/** Was unknown, then settled `failed` by an operator or the reconcile hook. */
export function heardDidNotTakeEffect(reason: string, settledBy: Actor | null): HeardResult {
  return {
    kind: 'did_not_take_effect',
    type: 'error-json',
    value: {
      status: 'did_not_take_effect',
      reason,
      settled_by: settledBy === null ? 'unknown' : describeActor(settledBy),
      note: NOTES.didNotTakeEffect,
    },
  };
}

export function heardCompensated(result: JsonValue | null, reason: string | null): HeardResult {
  return {
    kind: 'compensated',
    type: 'json',
    value: { status: 'compensated', result, reason, note: NOTES.compensated },
  };
}

export function heardRejected(reason: string): HeardResult {
  return {
    kind: 'rejected',
    type: 'error-json',
    value: { status: 'rejected', reason, note: NOTES.rejected },
  };
}

export function heardInvalidCall(error: string): HeardResult {
  return {
    kind: 'invalid_call',
    type: 'error-json',
    value: { status: 'invalid_call', error, note: NOTES.invalidCall },
  };
}

export function heardReadFailed(error: string): HeardResult {
  return {
    kind: 'read_failed',
    type: 'error-json',
    value: { status: 'failed', error, note: NOTES.readFailed },
  };
}

/**
 * What the model hears about a call's outcome, or undefined while it is unknown. `reason` is the
 * reason recorded with the settlement (an operator's resolve, a compensation), when the caller read it.
 */
export function heardOf(outcome: ToolCallOutcome, reason: string | null): HeardResult | undefined {
  switch (outcome.status) {
    case 'completed': {
      // A replay is a result this runtime recorded before a restart; a result an operator or the
      // reconcile hook established is told with what they recorded (`heardCompleted`).
      const replay = outcome.source === 'ledger' && outcome.record.settledBy?.kind === 'runtime';
      return replay ? heardReplayed(outcome.record.result) : heardCompleted(outcome.record, reason);
    }
    case 'failed':
      return heardOfFailed(outcome.record);
    case 'compensated':
      return heardCompensated(outcome.record.result, reason);
    case 'unknown':
      return undefined;
  }
}

/** Whether what the model hears of an outcome needs its record's history (`heardOfRecorded`). */
export function toldFromHistory(outcome: ToolCallOutcome): boolean {
  const { record } = outcome;
  return (
    (outcome.status === 'failed' && record.conflictAt !== null) ||
    outcome.status === 'compensated' ||
    (outcome.status === 'completed' && record.settledBy?.kind === 'operator')
  );
}

/**
 * `heardOf`, with what the words need from the record's history read first: an operator's reason for
 * a completion, a compensation's reason, what landed on a call settled `failed` (a conflict). Only
 * those outcomes read the history; every other is told from the record alone.
 */
export async function heardOfRecorded(
  store: Pick<LedgerStore, 'history'>,
  outcome: ToolCallOutcome,
): Promise<HeardResult | undefined> {
  const { record } = outcome;
  if (!toldFromHistory(outcome)) return heardOf(outcome, null);
  const conflict = outcome.status === 'failed' && record.conflictAt !== null;
  const history = await store.history(record.tenantId, record.idempotencyKey);
  if (conflict) return heardTookEffect(record, landedIn(history));
  const settled = history.findLast((e) => e.kind === 'transition' && e.to === record.status);
  return heardOf(outcome, settled?.reason ?? null);
}

/** What the last `conflict` event of a history says landed, if it says. */
export function landedIn(history: readonly LedgerEvent[]): Landed | null {
  const event = history.findLast((e) => e.kind === 'conflict' && e.to === 'completed');
  const detail = event?.detail;
  if (detail === null || detail === undefined || typeof detail !== 'object' || Array.isArray(detail)) {
    return event === undefined ? null : { result: null, resultReference: null };
  }
  const reference = detail.resultReference;
  return {
    result: detail.result ?? null,
    resultReference: typeof reference === 'string' ? reference : null,
  };
}

/**
 * A `failed` record: refused before sending, a read that gave up, or an unknown settled as not taken
 * — or one whose effect landed after all (a conflict), which took effect.
 */
export function heardOfFailed(record: ToolExecutionRecord): HeardResult {
  if (record.conflictAt !== null && record.effect !== 'read') return heardTookEffect(record, null);
  const message = record.error?.message ?? 'did not take effect';
  if (record.error?.code === 'TOOL_NOT_ATTEMPTED') return heardNotAttempted(message);
  if (record.effect === 'read') return heardReadFailed(message);
  return heardDidNotTakeEffect(message, record.settledBy);
}

export function heardOfRejection(approval: ApprovalRecord): HeardResult {
  const reason = approval.reason ?? 'rejected at approval';
  if (approval.repeatOf === null) return heardRejected(reason);
  return heardRejected(`${reason} (asked for as a repeat of tool call ${approval.repeatOf})`);
}

/** The earlier call a refused repeat names: what `TOOL_CALL_REPEAT`'s details carry of it. */
export interface RepeatedCall {
  readonly key: string;
  readonly status: ToolExecutionRecord['status'];
  readonly result: JsonValue | null;
  readonly resultReference: string | null;
}

/**
 * A repeat refused (`onRepeat: 'refuse'`): not run; the model hears the earlier call it repeats, what
 * it came to (its result, its downstream reference) and its key.
 */
export function heardRepeatRefused(earlier: ToolExecutionRecord): HeardResult {
  return heardRepeatOf({
    key: earlier.idempotencyKey,
    status: earlier.status,
    result: earlier.result,
    resultReference: earlier.resultReference,
  });
}

/**
 * `heardRepeatRefused` from a guarded call's `TOOL_CALL_REPEAT` refusal (`details.waiting` false), so
 * a loop of the application's own (oncely/ai-sdk, oncely/openai-agents) tells the model the same
 * words as a run; undefined for any other error, a waiting one included (the model is not told).
 */
export function heardOfRepeatRefusal(error: unknown): HeardResult | undefined {
  if (!isOncelyError(error, 'TOOL_CALL_REPEAT') || error.details?.waiting !== false) return undefined;
  const { repeatOf, earlier } = error.details as {
    repeatOf: string | null;
    earlier: Omit<RepeatedCall, 'key'> | null;
  };
  // A refusal always names the earlier call it read; without one there is nothing true to tell.
  if (repeatOf === null || earlier === null) return undefined;
  return heardRepeatOf({
    key: repeatOf,
    status: earlier.status,
    result: earlier.result,
    resultReference: earlier.resultReference,
  });
}

function heardRepeatOf(earlier: RepeatedCall): HeardResult {
  // Only a repeat of a call that took effect or may have is refused: a `failed` one had a conflict.
  const came =
    earlier.status === 'failed'
      ? 'took_effect'
      : earlier.status === 'started' || earlier.status === 'indeterminate'
        ? 'unknown'
        : earlier.status;
  return {
    kind: 'repeat_refused',
    type: 'error-json',
    value: {
      status: 'repeat_refused',
      earlier: {
        key: earlier.key,
        status: came,
        result: earlier.status === 'completed' ? earlier.result : null,
        result_reference: earlier.resultReference,
      },
      note: NOTES.repeatRefused,
    },
  };
}

function describeActor(actor: Actor): string {
  switch (actor.kind) {
    case 'operator':
      return `operator ${actor.id}`;
    case 'reconcile':
      return 'the reconcile hook';
    case 'runtime':
      return 'the runtime';
  }
}
