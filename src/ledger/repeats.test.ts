import { describe, expect, it } from 'vitest';
import { earlierOf, earlierState, repeatDigest } from './repeats.js';
import type { LedgerStatus } from './statuses.js';

const rec = (status: LedgerStatus, createdAt: string, conflictAt: string | null = null) => ({
  status,
  createdAt,
  conflictAt,
});

describe('repeats', () => {
  it.each([
    ['completed', null, 'standing'],
    ['compensated', null, 'standing'],
    ['started', null, 'unknown'],
    ['indeterminate', null, 'unknown'],
    ['failed', null, 'not_taken'],
    ['failed', '2026-12-07T10:00:00.000Z', 'standing'],
  ] as const)('an earlier %s call (conflict %s) is %s', (status, conflictAt, state) => {
    expect(earlierState({ status, conflictAt })).toBe(state);
  });

  it('answers to an unknown earlier call first, then to the newest standing one, never to one not taken', () => {
    const old = rec('completed', '2026-12-07T10:00:00.000Z');
    const newer = rec('compensated', '2026-12-07T11:00:00.000Z');
    const unknown = rec('started', '2026-12-07T09:00:00.000Z');
    const failed = rec('failed', '2026-12-07T12:00:00.000Z');
    expect(earlierOf([old, newer, failed])).toBe(newer);
    expect(earlierOf([old, unknown, newer])).toBe(unknown);
    expect(earlierOf([failed])).toBeUndefined();
    expect(earlierOf([])).toBeUndefined();
  });

  it('digests the tool and the canonical identity: key order does not matter, the tool does', () => {
    const one = repeatDigest('issue_credit', { a: 1, b: [2, 3] });
    expect(repeatDigest('issue_credit', { b: [2, 3], a: 1 })).toBe(one);
    expect(repeatDigest('issue_refund', { a: 1, b: [2, 3] })).not.toBe(one);
    expect(repeatDigest('issue_credit', { a: 1, b: [3, 2] })).not.toBe(one);
  });
});
