import { describe, expect, it } from 'vitest';
import { readAsk, sameOrder } from './brain.js';
import { goalMet, type PlayResult } from './game.js';

describe('what the bots read in a message', () => {
  it('reads an order and an amount, however they are written', () => {
    expect(readAsk('Hi, please refund order A-1042, $42.')).toEqual({ order: 'A-1042', amountCents: 4200 });
    expect(readAsk('Refund order a1042 please, 42 dollars.')).toEqual({ order: 'a1042', amountCents: 4200 });
    expect(readAsk('order #B 7, $4.20 back please')).toEqual({ order: 'B 7', amountCents: 420 });
    expect(readAsk('It failed? Please try again.')).toEqual({ again: true });
    expect(readAsk('hello')).toBeUndefined();
    expect(readAsk('refund order A-1042')).toBeUndefined();
  });

  it('compares orders as a person would, not as a hash does', () => {
    expect(sameOrder('A-1042', 'a1042')).toBe(true);
    expect(sameOrder('A-1042', 'A-1043')).toBe(false);
  });
});

describe('a level goal, from the books and the records alone', () => {
  const payout = (amountCents: number, voided = false): PlayResult['payouts'][number] => ({
    paymentId: `cr_${amountCents}`,
    order: 'A-1042',
    amountCents,
    voided,
    key: null,
  });
  const result = (payouts: PlayResult['payouts'], recorded: number, approvedCents: number | null = null) => ({
    bot: 'naive' as const,
    lines: [],
    payouts,
    recorded,
    approvedCents,
    ledger: [],
    heard: [],
  });

  it('paid twice counts standing refunds only', () => {
    expect(goalMet('paid-twice', result([payout(4200), payout(4200)], 2))).toBe(true);
    expect(goalMet('paid-twice', result([payout(4200), payout(4200, true)], 2))).toBe(false);
  });

  it('unrecorded compares the books with what the bot wrote down', () => {
    expect(goalMet('unrecorded', result([payout(4200), payout(4200)], 1))).toBe(true);
    expect(goalMet('unrecorded', result([payout(4200)], 1))).toBe(false);
  });

  it('unapproved needs an approval, and a payment above it', () => {
    expect(goalMet('unapproved', result([payout(42_000)], 1, 420))).toBe(true);
    expect(goalMet('unapproved', result([payout(420)], 1, 420))).toBe(false);
    expect(goalMet('unapproved', result([payout(42_000)], 1, null))).toBe(false);
  });
});
