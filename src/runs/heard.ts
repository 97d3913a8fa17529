import type { ToolCallOutcome } from '../calls/index.js';
import type { Actor, JsonValue, ToolExecutionRecord } from '../ledger/index.js';
import type { ApprovalRecord, HeardResult } from '../run-state/index.js';

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
} as const;

/** Took effect just now (or was found downstream by the reconcile hook, or resolved by an operator). */
export function heardCompleted(result: JsonValue | null): HeardResult {
  return { kind: 'completed', type: 'json', value: { status: 'completed', result } };
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

/** What the model hears about a call's outcome, or undefined while it is unknown. */
export function heardOf(
  outcome: ToolCallOutcome,
  compensationReason: string | null,
): HeardResult | undefined {
  switch (outcome.status) {
    case 'completed': {
      // A replay is a result this runtime recorded before a restart; a result an operator or the
      // reconcile hook established is told as plainly completed, as if the timeout never happened.
      const replay = outcome.source === 'ledger' && outcome.record.settledBy?.kind === 'runtime';
      return replay ? heardReplayed(outcome.record.result) : heardCompleted(outcome.record.result);
    }
    case 'failed':
      return heardOfFailed(outcome.record);
    case 'compensated':
      return heardCompensated(outcome.record.result, compensationReason);
    case 'unknown':
      return undefined;
  }
}

/** A `failed` record: refused before sending, a read that gave up, or an unknown settled as not taken. */
export function heardOfFailed(record: ToolExecutionRecord): HeardResult {
  const message = record.error?.message ?? 'did not take effect';
  if (record.error?.code === 'TOOL_NOT_ATTEMPTED') return heardNotAttempted(message);
  if (record.effect === 'read') return heardReadFailed(message);
  return heardDidNotTakeEffect(message, record.settledBy);
}

export function heardOfRejection(approval: ApprovalRecord): HeardResult {
  return heardRejected(approval.reason ?? 'rejected at approval');
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
