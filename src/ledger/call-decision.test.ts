import { describe, expect, it } from 'vitest';
import {
  CALL_DECISION_TABLE,
  attemptMayLand,
  decideCall,
  decideHookAnswer,
  landsUntil,
  type CallAction,
  type CallFacts,
} from './call-decision.js';
import { LEDGER_STATUSES, type LedgerStatus } from './statuses.js';
import { contradicts } from './transitions.js';

type Settler = 'runtime' | 'reconcile' | 'operator' | null;
const SETTLERS: readonly Settler[] = ['runtime', 'reconcile', 'operator', null];
const APPROVALS: readonly CallFacts['approval'][] = ['not_needed', 'none', 'pending', 'approved', 'rejected'];
const BOOLS = [false, true] as const;
const REPEATS: (CallFacts['repeat'] | undefined)[] = [
  undefined,
  ...(['standing', 'unknown'] as const).flatMap((earlier) =>
    (['ask', 'refuse'] as const).map((policy) => ({ earlier, policy })),
  ),
];

/** Every combination of facts the table can be asked about. */
function everyFacts(): CallFacts[] {
  const all: CallFacts[] = [];
  const records: (CallFacts['record'] | undefined)[] = [
    undefined,
    ...LEDGER_STATUSES.flatMap((status) =>
      SETTLERS.flatMap((settledBy) => BOOLS.map((conflicted) => ({ status, settledBy, conflicted }))),
    ),
  ];
  for (const record of records)
    for (const approval of APPROVALS)
      for (const caller of ['run', 'guarded'] as const)
        for (const hasHook of BOOLS)
          for (const mayLand of BOOLS)
            for (const attemptsExhausted of BOOLS)
              for (const repeat of record === undefined ? REPEATS : [undefined]) {
                all.push({
                  ...(record === undefined ? {} : { record }),
                  ...(repeat === undefined ? {} : { repeat }),
                  approval,
                  caller,
                  hasHook,
                  mayLand,
                  attemptsExhausted,
                });
              }
  return all;
}

const base = {
  approval: 'not_needed',
  caller: 'guarded',
  hasHook: false,
  mayLand: false,
  attemptsExhausted: false,
} as const satisfies CallFacts;
const rec = (status: LedgerStatus, settledBy: Settler = null, conflicted = false) => ({
  record: { status, settledBy, conflicted },
});

describe('the call decision table', () => {
  it.each<[string, CallFacts, CallAction]>([
    ['a new call whose approval was never asked for', { ...base, approval: 'none' }, 'request_approval'],
    ['a new call whose approval is pending', { ...base, approval: 'pending' }, 'await_approval'],
    ['a new call an operator rejected', { ...base, approval: 'rejected' }, 'rejected'],
    ['a new call', base, 'reserve'],
    ['a new approved call', { ...base, approval: 'approved' }, 'reserve'],
    [
      'a repeat of a call that took effect, under ask',
      { ...base, repeat: { earlier: 'standing', policy: 'ask' } },
      'request_approval',
    ],
    [
      'a repeat of a call that took effect, under ask, its approval pending',
      { ...base, approval: 'pending', repeat: { earlier: 'standing', policy: 'ask' } },
      'await_approval',
    ],
    [
      'a repeat an operator approved',
      { ...base, approval: 'approved', repeat: { earlier: 'standing', policy: 'ask' } },
      'reserve',
    ],
    [
      'a repeat an operator rejected',
      { ...base, approval: 'rejected', repeat: { earlier: 'standing', policy: 'ask' } },
      'rejected',
    ],
    [
      'a repeat of a call that took effect, under refuse',
      { ...base, repeat: { earlier: 'standing', policy: 'refuse' } },
      'refuse_repeat',
    ],
    [
      'a repeat of a call that took effect, under refuse, of a tool that needs an approval',
      { ...base, approval: 'none', repeat: { earlier: 'standing', policy: 'refuse' } },
      'refuse_repeat',
    ],
    [
      'a repeat of a call nobody knows the outcome of, even an approved one',
      { ...base, approval: 'approved', repeat: { earlier: 'unknown', policy: 'ask' } },
      'await_earlier',
    ],
    [
      'a completed call, even one that may land',
      { ...base, ...rec('completed', 'runtime'), mayLand: true },
      'replay',
    ],
    ['a compensated call', { ...base, ...rec('compensated', 'operator') }, 'tell'],
    [
      'a started call whose attempt may land, hook or not',
      { ...base, ...rec('started'), mayLand: true, hasHook: true },
      'wait',
    ],
    [
      'a started call that cannot land, with a hook',
      { ...base, ...rec('started'), hasHook: true },
      'ask_hook',
    ],
    ['a started call that cannot land, no hook', { ...base, ...rec('started') }, 'unknown'],
    [
      'an indeterminate call with a hook, even one that may land',
      { ...base, ...rec('indeterminate'), hasHook: true, mayLand: true },
      'ask_hook',
    ],
    ['an indeterminate call without a hook', { ...base, ...rec('indeterminate') }, 'unknown'],
    [
      "a run's call an operator settled failed",
      { ...base, ...rec('failed', 'operator'), caller: 'run' },
      'tell',
    ],
    [
      "a run's call its own attempt reported failed",
      { ...base, ...rec('failed', 'runtime'), caller: 'run' },
      'tell',
    ],
    [
      'a failed key that has had its attempts',
      { ...base, ...rec('failed', 'reconcile'), attemptsExhausted: true },
      'tell',
    ],
    [
      'a failed key whose last attempt may still land',
      { ...base, ...rec('failed', 'reconcile'), mayLand: true },
      'wait',
    ],
    [
      "a run's call the hook found failed, that cannot land",
      { ...base, ...rec('failed', 'reconcile'), caller: 'run' },
      'reopen',
    ],
    [
      'a guarded call an operator settled failed, that cannot land',
      { ...base, ...rec('failed', 'operator') },
      'reopen',
    ],
    ['a guarded call that was not attempted', { ...base, ...rec('failed', 'runtime') }, 'reopen'],
    [
      'a guarded call an operator forced failed, whose attempt then landed (a conflict)',
      { ...base, ...rec('failed', 'operator', true) },
      'tell',
    ],
    [
      "a run's call the hook found failed, whose attempt then landed (a conflict)",
      { ...base, ...rec('failed', 'reconcile', true), caller: 'run' },
      'tell',
    ],
    [
      'a completed call that took a second effect (a conflict) still replays',
      { ...base, ...rec('completed', 'runtime', true) },
      'replay',
    ],
  ])('%s → %s', (_what, facts, action) => {
    expect(decideCall(facts).action).toBe(action);
  });

  it('has an answer for every combination of facts, and every row decides some of them', () => {
    const all = everyFacts();
    const used = new Set<number>();
    for (const facts of all) {
      const index = CALL_DECISION_TABLE.findIndex((row) => row.when(facts));
      expect(index, JSON.stringify(facts)).toBeGreaterThanOrEqual(0);
      used.add(index);
    }
    expect([...used].sort((a, b) => a - b)).toEqual(CALL_DECISION_TABLE.map((_, i) => i));
  });

  it('never runs a call while an attempt of it may still land, nor past its attempts, nor without its approval', () => {
    for (const facts of everyFacts()) {
      const { action } = decideCall(facts);
      const runs = action === 'reserve' || action === 'reopen';
      const what = JSON.stringify(facts);
      if (facts.record !== undefined) expect(action, what).not.toBe('reserve');
      if (facts.record === undefined)
        expect(['reopen', 'replay', 'ask_hook', 'wait', 'unknown'], what).not.toContain(action);
      if (facts.repeat === undefined) expect(['await_earlier', 'refuse_repeat'], what).not.toContain(action);
      if (action === 'reopen') {
        expect(facts.record?.status, what).toBe('failed');
        // A failed record whose attempt landed afterwards took effect: it is never run again.
        expect(facts.record?.conflicted, what).toBe(false);
        expect(facts.mayLand, what).toBe(false);
        expect(facts.attemptsExhausted, what).toBe(false);
      }
      if (runs && facts.record === undefined)
        expect(['not_needed', 'approved'], what).toContain(facts.approval);
      // A repeat of a standing effect runs only with an operator's approval; of an unknown one, never.
      if (runs && facts.repeat !== undefined) {
        expect(facts.repeat.earlier, what).toBe('standing');
        expect(facts.approval, what).toBe('approved');
      }
      // A started record whose attempt may land is neither reconciled nor run: a frozen process is not gone.
      if (facts.record?.status === 'started' && facts.mayLand) expect(action, what).toBe('wait');
      // What took effect is never run or asked again.
      if (facts.record?.status === 'completed') expect(action, what).toBe('replay');
      // An operator's failed is what a run's model hears; a run never re-runs it.
      if (
        facts.caller === 'run' &&
        facts.record?.status === 'failed' &&
        facts.record.settledBy === 'operator'
      )
        expect(action, what).toBe('tell');
    }
  });
});

describe('a reconcile hook’s answer', () => {
  it.each([
    ['completed', false, false, 'complete'],
    ['completed', true, true, 'complete'],
    ['unknown', false, false, 'note'],
    ['failed', true, false, 'note'],
    ['failed', false, true, 'note'],
    ['failed', true, true, 'note'],
    ['failed', false, false, 'fail'],
  ] as const)(
    '%s (may land %s, attempts exhausted %s) → %s',
    (answer, mayLand, attemptsExhausted, action) => {
      expect(decideHookAnswer(answer, { mayLand, attemptsExhausted }).action).toBe(action);
    },
  );

  it('says why a failed answer only became a note', () => {
    expect(decideHookAnswer('failed', { mayLand: true, attemptsExhausted: false }).why).toMatch(
      /may still land/,
    );
    expect(decideHookAnswer('failed', { mayLand: false, attemptsExhausted: true }).why).toMatch(
      /maximum of attempts/,
    );
  });
});

describe('whether an attempt may still land', () => {
  const startedAt = '2026-05-04T10:00:00.000Z';
  const t0 = Date.parse(startedAt);
  const record = (
    status: LedgerStatus,
    settledBy: 'runtime' | 'reconcile' | null = null,
    timeout: number | null = 1_000,
  ) => ({
    status,
    settledBy: settledBy === null ? null : { kind: settledBy, id: 'x' },
    attemptStartedAt: startedAt,
    attemptTimeoutMs: timeout,
  });
  const at = (
    nowMs: number,
    r = record('started'),
    more: { inFlightHere?: boolean; otherLeaseLive?: boolean } = {},
  ) =>
    attemptMayLand({
      record: r,
      inFlightHere: more.inFlightHere ?? false,
      otherLeaseLive: more.otherLeaseLive ?? false,
      nowMs,
      marginMs: 500,
    });

  it('may land until its timeout plus the margin have passed', () => {
    expect(at(t0 + 1_499)).toBe(true);
    expect(at(t0 + 1_500)).toBe(false);
    expect(landsUntil(record('started'), 500)).toBe(t0 + 1_500);
    expect(at(t0 + 499, record('started', null, null))).toBe(true);
    expect(at(t0 + 500, record('started', null, null))).toBe(false);
  });

  it('may land, however old, while it runs in this process or its run is held by a live driver', () => {
    expect(at(t0 + 60_000, record('indeterminate'), { inFlightHere: true })).toBe(true);
    expect(at(t0 + 60_000, record('started'), { otherLeaseLive: true })).toBe(true);
  });

  it('cannot land once it reported its own outcome, or once the call is settled as taken', () => {
    expect(at(t0, record('failed', 'runtime'))).toBe(false);
    expect(at(t0, record('failed', 'reconcile'))).toBe(true);
    expect(at(t0, record('completed', 'runtime'))).toBe(false);
    expect(at(t0, record('compensated', 'runtime'))).toBe(false);
  });
});

describe('what contradicts a settled record', () => {
  it.each([
    [
      'an effect on a call settled failed',
      { via: 'outcome', to: 'completed', attempt: 1, keyed: true },
      { status: 'failed', attempt: 1 },
      true,
    ],
    [
      'a hook that finds an effect on a call settled failed',
      { via: 'reconcile', to: 'completed', attempt: 1, keyed: false },
      { status: 'failed', attempt: 1 },
      true,
    ],
    [
      'an earlier attempt that landed after a re-open, unkeyed',
      { via: 'outcome', to: 'completed', attempt: 1, keyed: false },
      { status: 'completed', attempt: 2 },
      true,
    ],
    [
      'an earlier attempt that landed after a re-open, keyed (one effect)',
      { via: 'outcome', to: 'completed', attempt: 1, keyed: true },
      { status: 'completed', attempt: 2 },
      false,
    ],
    [
      'an attempt that ended unknown after a re-open, unkeyed (a frozen process: it may have landed too)',
      { via: 'outcome', to: 'indeterminate', attempt: 1, keyed: false },
      { status: 'completed', attempt: 2 },
      true,
    ],
    [
      'an attempt that ended unknown after a re-open, keyed (one effect)',
      { via: 'outcome', to: 'indeterminate', attempt: 1, keyed: true },
      { status: 'completed', attempt: 2 },
      false,
    ],
    [
      'an attempt that ended unknown after its call was settled failed',
      { via: 'outcome', to: 'indeterminate', attempt: 1, keyed: true },
      { status: 'failed', attempt: 1 },
      true,
    ],
    [
      'an attempt that ended unknown on a call settled completed by its own attempt',
      { via: 'outcome', to: 'indeterminate', attempt: 1, keyed: false },
      { status: 'completed', attempt: 1 },
      false,
    ],
    [
      'a not-attempted outcome on a call recorded completed',
      { via: 'outcome', to: 'failed', attempt: 2, keyed: true },
      { status: 'completed', attempt: 2 },
      true,
    ],
    [
      'an earlier attempt that did not take effect',
      { via: 'outcome', to: 'failed', attempt: 1, keyed: false },
      { status: 'completed', attempt: 2 },
      false,
    ],
    [
      'a late completed that agrees',
      { via: 'outcome', to: 'completed', attempt: 1, keyed: false },
      { status: 'completed', attempt: 1 },
      false,
    ],
    [
      'a timeout after the call was settled completed (by a hook or an operator who found the effect)',
      { via: 'outcome', to: 'indeterminate', attempt: 1, keyed: false },
      { status: 'completed', attempt: 1 },
      false,
    ],
    [
      "an operator's decision that lost a race",
      { via: 'resolve', to: 'completed', attempt: 1, keyed: false },
      { status: 'failed', attempt: 1 },
      false,
    ],
  ] as const)('%s → %s', (_what, observed, current, expected) => {
    expect(contradicts(observed, current)).toBe(expected);
  });
});
