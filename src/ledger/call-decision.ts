import type { Actor } from './record.js';
import type { LedgerStatus } from './statuses.js';

/*
 * One place decides what happens to a call. Both the run loop and the guarded call (executeToolCall,
 * compensations) gather the facts and ask `decideCall`; neither re-decides with its own if-chain.
 * The table is pure: no I/O, no clock. Its rule at the edges: a key is never re-opened, and a
 * `started` record is never reconciled, while its last attempt may still land.
 */

/** What to do with a call. */
export const CALL_ACTIONS = [
  'reserve', //          no record: reserve it and run the tool
  'reopen', //           `failed` and its last attempt can no longer land: re-reserve, same key, and run
  'replay', //           `completed`: the recorded result, the tool not called
  'tell', //             settled otherwise (`failed`, `compensated`): say what it came to, run nothing
  'ask_hook', //         unknown: ask the reconcile hook what became of it
  'wait', //             an attempt may still land: neither run nor settle; look again later
  'unknown', //          unknown and nothing here can tell: an operator settles it
  'request_approval', // needs an approval nobody asked for yet: ask, then wait
  'await_approval', //   asked, not decided yet
  'rejected', //         an operator rejected it: it is never run
  'await_earlier', //    a repeat of an earlier call nobody knows the outcome of yet: wait for it
  'refuse_repeat', //    a repeat of a call that took effect, under `refuse`: never run; say so
] as const;
export type CallAction = (typeof CALL_ACTIONS)[number];

export interface CallFacts {
  /** The call's ledger record, or undefined when it has none yet. */
  readonly record?: {
    readonly status: LedgerStatus;
    /** Who settled it: `runtime` is the attempt's own outcome, `reconcile` the hook, `operator` a resolve. */
    readonly settledBy: Actor['kind'] | null;
    /** A real outcome contradicted it after it was settled (`conflictAt`): on a `failed` record, it took effect. */
    readonly conflicted: boolean;
  };
  /**
   * For a call with no record: its approval — the tool's own, or a repeat's — as it stands; `none`
   * when the tool needs one and none was asked for, `not_needed` when neither needs one.
   */
  readonly approval: 'not_needed' | 'none' | 'pending' | 'approved' | 'rejected';
  /**
   * For a call with no record: an earlier call of its scope with the same identity (a repeat) that
   * took effect or may have, and the repeat policy; absent when there is none, or under `allow`.
   */
  readonly repeat?: { readonly earlier: 'standing' | 'unknown'; readonly policy: 'ask' | 'refuse' };
  /** A run tells the model what an operator decided; a guarded call runs a `failed` key again. */
  readonly caller: 'run' | 'guarded';
  readonly hasHook: boolean;
  /**
   * The last attempt may still land: an attempt of this key is still running in this process, or
   * its run is held by another live driver, or it is younger than its timeout plus a margin.
   */
  readonly mayLand: boolean;
  /** The key has had its maximum of attempts: it is never re-opened again. */
  readonly attemptsExhausted: boolean;
}

export interface CallDecision {
  readonly action: CallAction;
  /** The row that decided, in words: for logs, notes and tests. */
  readonly why: string;
}

interface Row {
  readonly when: (f: CallFacts) => boolean;
  readonly action: CallAction;
  readonly why: string;
}

const status = (f: CallFacts): LedgerStatus | undefined => f.record?.status;

/** The table, first match wins. Every combination of facts matches exactly one row's `when` first. */
export const CALL_DECISION_TABLE: readonly Row[] = [
  { when: (f) => !f.record && f.approval === 'rejected', action: 'rejected', why: 'an operator rejected it' },
  {
    when: (f) => !f.record && f.approval === 'pending',
    action: 'await_approval',
    why: 'the approval is not decided yet',
  },
  // Nobody can know yet whether this would be a second effect, not even an approver: wait.
  {
    when: (f) => !f.record && f.repeat?.earlier === 'unknown',
    action: 'await_earlier',
    why: 'an identical earlier call may have taken effect; it waits until that one is settled',
  },
  { when: (f) => !f.record && f.approval === 'approved', action: 'reserve', why: 'an operator approved it' },
  {
    when: (f) => !f.record && f.repeat?.policy === 'refuse',
    action: 'refuse_repeat',
    why: 'an identical earlier call took effect, and repeats are refused',
  },
  {
    when: (f) => !f.record && f.repeat !== undefined,
    action: 'request_approval',
    why: 'an identical earlier call took effect; an operator decides whether this one goes out too',
  },
  {
    when: (f) => !f.record && f.approval === 'none',
    action: 'request_approval',
    why: 'needs an approval; none was asked for yet',
  },
  { when: (f) => !f.record, action: 'reserve', why: 'a new call' },
  {
    when: (f) => status(f) === 'completed',
    action: 'replay',
    why: 'it took effect; the recorded result stands',
  },
  { when: (f) => status(f) === 'compensated', action: 'tell', why: 'it took effect and was undone' },
  {
    when: (f) => status(f) === 'started' && f.mayLand,
    action: 'wait',
    why: 'its attempt may still be running',
  },
  {
    when: (f) => status(f) === 'started' && f.hasHook,
    action: 'ask_hook',
    why: 'its attempt can no longer land; the hook can tell',
  },
  {
    when: (f) => status(f) === 'started',
    action: 'unknown',
    why: 'its attempt can no longer land, and no hook can tell',
  },
  // A hook may find an indeterminate call completed even while its attempt may still land; a
  // `failed` answer then only becomes a note (see `decideHookAnswer`).
  { when: (f) => status(f) === 'indeterminate' && f.hasHook, action: 'ask_hook', why: 'the hook can tell' },
  { when: (f) => status(f) === 'indeterminate', action: 'unknown', why: 'no hook can tell' },
  // Whoever settled it `failed`, an attempt landed afterwards: running it again (a compensation's
  // undo, a key's next attempt) would make a second effect. The record stays; an operator decides.
  {
    when: (f) => f.record?.conflicted === true,
    action: 'tell',
    why: 'it is recorded failed, but an attempt of it took effect afterwards (a conflict); an operator decides',
  },
  {
    when: (f) => f.caller === 'run' && f.record?.settledBy === 'operator',
    action: 'tell',
    why: 'an operator settled it failed',
  },
  {
    when: (f) => f.caller === 'run' && f.record?.settledBy === 'runtime',
    action: 'tell',
    why: 'its own attempt reported it failed',
  },
  {
    when: (f) => f.attemptsExhausted,
    action: 'tell',
    why: 'it failed, and the key has had its maximum of attempts',
  },
  {
    when: (f) => f.mayLand,
    action: 'wait',
    why: 'it is recorded failed, but its last attempt may still land',
  },
  {
    when: () => true,
    action: 'reopen',
    why: 'it definitely did not take effect, and its last attempt can no longer land',
  },
];

/**
 * What happens to a call, from the facts about it.
 *
 * @example
 * decideCall({ record: { status: 'failed', settledBy: 'reconcile', conflicted: false }, approval: 'not_needed',
 *   caller: 'run', hasHook: true, mayLand: true, attemptsExhausted: false }).action; // 'wait'
 */
export function decideCall(facts: CallFacts): CallDecision {
  const row = CALL_DECISION_TABLE.find((r) => r.when(facts));
  if (row === undefined) throw new Error('the call decision table has no row for these facts');
  return { action: row.action, why: row.why };
}

/** What a reconcile hook's answer does to an unknown record. */
export type HookAnswerAction = 'complete' | 'fail' | 'note';

/**
 * A hook's `failed` settles the call only once its last attempt can no longer land (a hook cannot
 * see a request that has not arrived yet) and while the key may still be tried again; otherwise it
 * is written down as a note and the call stays unknown — for the attempt to land, or an operator.
 */
export function decideHookAnswer(
  answer: 'completed' | 'failed' | 'unknown',
  facts: Pick<CallFacts, 'mayLand' | 'attemptsExhausted'>,
): { readonly action: HookAnswerAction; readonly why: string } {
  if (answer === 'completed') return { action: 'complete', why: 'found downstream by the reconcile hook' };
  if (answer === 'unknown') return { action: 'note', why: 'the reconcile hook could not tell' };
  if (facts.mayLand) {
    return {
      action: 'note',
      why: 'the reconcile hook found nothing yet, but the last attempt may still land; the call stays unknown until it can no longer land',
    };
  }
  if (facts.attemptsExhausted) {
    return {
      action: 'note',
      why: 'the reconcile hook found nothing, but this key has had its maximum of attempts; an operator decides',
    };
  }
  return { action: 'fail', why: 'the reconcile hook found that it did not take effect' };
}

/** Attempts of one key before it is never re-opened again (a hook that keeps answering `failed`). */
export const DEFAULT_MAX_ATTEMPTS = 3;

/** Added to an attempt's timeout before it is taken to be unable to land (clocks, a slow commit). */
export const DEFAULT_LANDING_MARGIN_MS = 5_000;

/**
 * Whether the last attempt of a record may still land, from what the caller knows: an attempt in
 * flight in this process, a live lease of another driver on its run, or its age against its
 * timeout plus the margin. An attempt that reported its own outcome (`settledBy: runtime` on a
 * `failed` record) has ended. Pure: the caller passes the time.
 */
export function attemptMayLand(input: {
  readonly record: {
    readonly status: LedgerStatus;
    readonly settledBy: Actor | null;
    readonly attemptStartedAt: string;
    readonly attemptTimeoutMs: number | null;
  };
  readonly inFlightHere: boolean;
  readonly otherLeaseLive: boolean;
  readonly nowMs: number;
  readonly marginMs: number;
}): boolean {
  const { record } = input;
  if (input.inFlightHere || input.otherLeaseLive) return true;
  if (record.status === 'completed' || record.status === 'compensated') return false;
  if (record.status === 'failed' && record.settledBy?.kind === 'runtime') return false;
  return input.nowMs < landsUntil(record, input.marginMs);
}

/** When the last attempt of a record would have ended: its start plus its timeout (ms since the epoch). */
export function attemptDeadline(record: {
  readonly attemptStartedAt: string;
  readonly attemptTimeoutMs: number | null;
}): number {
  return Date.parse(record.attemptStartedAt) + (record.attemptTimeoutMs ?? 0);
}

/** When the last attempt of a record can no longer land, by its age (ms since the epoch). */
export function landsUntil(
  record: { readonly attemptStartedAt: string; readonly attemptTimeoutMs: number | null },
  marginMs: number,
): number {
  return attemptDeadline(record) + marginMs;
}

/**
 * The one definition of an unknown call, shared by the library (`listUnknownCalls`), the API
 * (`GET /v1/tool-executions`), the CLI (`oncely executions list`), the console and the metrics (the
 * stores' `unknownCalls` and `stats` say the same in SQL): `started` or `indeterminate`, and its last
 * attempt can no longer land (`attemptMayLand`: its deadline and the margin have passed and, for a
 * `started` call of a run, no live driver holds the run). A call that may still land is in flight:
 * nobody can know its outcome yet, so nobody is asked to settle it.
 */
export function isUnknownCall(input: {
  readonly record: {
    readonly status: LedgerStatus;
    readonly settledBy: Actor | null;
    readonly attemptStartedAt: string;
    readonly attemptTimeoutMs: number | null;
    readonly compensationOf: string | null;
  };
  /** Whether the record's run has a live lease (a driver holds it). */
  readonly runLeaseLive: boolean;
  readonly nowMs: number;
  readonly marginMs: number;
}): boolean {
  const { record } = input;
  if (record.status !== 'started' && record.status !== 'indeterminate') return false;
  const held = input.runLeaseLive && record.status === 'started' && record.compensationOf === null;
  return !attemptMayLand({ ...input, inFlightHere: false, otherLeaseLive: held });
}
