import { describe, expect, it } from 'vitest';
import { judge, type Ledger, type RecordRow } from './checks.js';
import type { Books, Effect } from './downstream.js';

/*
 * Each rule of the drill's verdict fails on the ledger and books it is there to catch, and passes on
 * the honest ones (so a passing drill means something).
 */

const T0 = Date.parse('2026-12-06T10:00:00.000Z');

function record(over: Partial<RecordRow> = {}): RecordRow {
  return {
    key: 'run_1:call_a',
    runId: 'run_1',
    toolCallId: 'call_a',
    toolName: 'charge',
    status: 'completed',
    attempt: 1,
    resultReference: 'fx_1',
    settledBy: null,
    conflict: false,
    ...over,
  };
}

function effect(over: Partial<Effect> = {}): Effect {
  return {
    id: 'fx_1',
    kind: 'unkeyed',
    key: null,
    reference: 'run_1:call_a',
    attempt: 1,
    fencingToken: 1,
    sender: 'host:1',
    at: new Date(T0 + 50).toISOString(),
    amountCents: 700,
    ...over,
  };
}

/** One run, driven by host:1 (epoch 1), whose step asked for call_a, reserved and completed by host:1. */
function honest(records: readonly RecordRow[] = [record()]): Ledger {
  return {
    runs: [{ runId: 'run_1', agent: 'a', status: 'completed', reason: null }],
    records,
    history: [
      {
        key: 'run_1:call_a',
        at: T0 + 20,
        actorKind: 'runtime',
        actorId: 'host:1',
        via: 'reserve',
        from: null,
        to: 'started',
        attempt: 1,
      },
      {
        key: 'run_1:call_a',
        at: T0 + 60,
        actorKind: 'runtime',
        actorId: 'host:1',
        via: 'outcome',
        from: 'started',
        to: 'completed',
        attempt: 1,
      },
    ],
    events: [
      { runId: 'run_1', seq: 1, at: T0, type: 'run.claimed', data: { owner: 'host:1', epoch: 1 } },
      {
        runId: 'run_1',
        seq: 2,
        at: T0 + 20,
        type: 'model.response',
        data: { step: 1, calls: [{ toolCallId: 'call_a' }] },
      },
    ],
  };
}

const books = (...effects: Effect[]): Books[] => [{ kind: 'unkeyed', effects, requests: effects.length }];
const rules = (ledger: Ledger, b: Books[]): string[] => judge(ledger, b).violations.map((v) => v.rule);

describe('the drill verdict', () => {
  it('passes an honest ledger and its books', () => {
    expect(judge(honest(), books(effect()))).toEqual({ violations: [], effects: 1, admittedDuplicates: 0 });
  });

  it('finds a second effect of one call, unless its record shows the conflict of two attempts', () => {
    const twice = books(effect(), effect({ id: 'fx_2', attempt: 1 }));
    expect(rules(honest(), twice)).toContain('duplicate-effect');
    const admitted = books(effect(), effect({ id: 'fx_2', attempt: 2 }));
    const verdict = judge(honest([record({ conflict: true, attempt: 2 })]), admitted);
    expect(verdict.violations).toEqual([]);
    expect(verdict.admittedDuplicates).toBe(1);
  });

  it('finds a completed record with no effect, and an effect whose record says it failed', () => {
    expect(rules(honest(), books())).toEqual(['completed-without-effect']);
    expect(rules(honest([record({ status: 'failed', resultReference: null })]), books(effect()))).toEqual([
      'effect-not-completed',
    ]);
  });

  it('finds an effect the ledger has no record of, and a reference that is none of the effects', () => {
    expect(rules(honest(), books(effect(), effect({ id: 'fx_9', reference: 'run_1:call_zz' })))).toContain(
      'effect-without-record',
    );
    expect(rules(honest([record({ resultReference: 'fx_other' })]), books(effect()))).toEqual([
      'reference-mismatch',
    ]);
  });

  it('finds an attempt started by a driver after it lost the lease, and an outcome under another attempt', () => {
    const ledger = honest();
    const late: Ledger = {
      ...ledger,
      events: [
        ...ledger.events,
        { runId: 'run_1', seq: 3, at: T0 + 10, type: 'run.claimed', data: { owner: 'host:2', epoch: 2 } },
      ],
    };
    expect(rules(late, books(effect()))).toEqual(['attempt-without-lease']);
    const other: Ledger = {
      ...ledger,
      history: [ledger.history[0]!, { ...ledger.history[1]!, actorId: 'host:3' }],
    };
    expect(rules(other, books(effect()))).toEqual(['outcome-of-another-attempt']);
  });

  it('finds a step asked of the model twice, and a call no saved response asked for', () => {
    const ledger = honest();
    const twice: Ledger = { ...ledger, events: [...ledger.events, { ...ledger.events[1]!, seq: 3 }] };
    expect(rules(twice, books(effect()))).toEqual(['step-asked-again']);
    expect(rules(honest([record({ toolCallId: 'call_b', key: 'run_1:call_a' })]), books(effect()))).toEqual([
      'call-not-asked',
    ]);
  });

  it('finds a run in limbo: still running, or waiting on no unknown call; a failed run needs a reason', () => {
    const run = (status: string, reason: string | null = null): Ledger => ({
      ...honest(),
      runs: [{ runId: 'run_1', agent: 'a', status, reason }],
    });
    expect(rules(run('running'), books(effect()))).toEqual(['run-in-limbo']);
    expect(rules(run('awaiting_reconciliation'), books(effect()))).toEqual(['run-in-limbo']);
    expect(rules(run('failed'), books(effect()))).toEqual(['run-in-limbo']);
    expect(rules(run('failed', 'the model was unavailable'), books(effect()))).toEqual([]);
  });
});
