import { describe, expect, it } from 'vitest';
import { LEVELS, playTrick, type PlayResult } from '../../src/heist/game.js';

/*
 * The levels whose tricks talk to the bot (no processes to kill or freeze), played in this process as
 * the game plays them: each against the naive bot and against Penny, from a fresh start, with the
 * payments service's books, Penny's ledger and her approvals read afterwards.
 */

const standing = (r: PlayResult): PlayResult['payouts'] => r.payouts.filter((p) => !p.voided);

/** Penny paid once, under the key of her one completed ledger record, and the goal was not reached. */
function pennyPaidOnce(penny: PlayResult): void {
  expect(penny.error, penny.lines.map((l) => `${l.who}: ${l.text}`).join('\n')).toBeUndefined();
  expect(penny.goalMet).toBe(false);
  expect(standing(penny)).toHaveLength(1);
  const completed = penny.ledger.filter((c) => c.status === 'completed');
  expect(completed.map((c) => c.key)).toEqual([standing(penny)[0]?.key]);
  expect(penny.recorded).toBe(1);
}

describe('level 9: the customer says the refund never arrived', () => {
  const level = LEVELS.find((l) => l.number === 9);

  it('is a paid-twice level whose own trick is "never arrived"', () => {
    expect(level?.goal).toBe('paid-twice');
    expect(level?.tricks[0]).toBe('never-arrived');
  });

  it('the naive bot pays twice: its hash of the arguments misses "order a1042, 42 dollars"', async () => {
    const naive = await playTrick('never-arrived', 'naive', 'paid-twice');
    expect(naive.error).toBeUndefined();
    expect(naive.goalMet).toBe(true);
    expect(standing(naive).map((p) => [p.order, p.amountCents, p.key])).toEqual([
      ['A-1042', 4200, null],
      ['a1042', 4200, null],
    ]);
    expect(naive.recorded).toBe(2);
  }, 30_000);

  it('Penny makes the call again, oncely holds it as a repeat, the supervisor rejects it, Penny gives the receipt', async () => {
    const penny = await playTrick('never-arrived', 'penny', 'paid-twice');
    pennyPaidOnce(penny);
    const [paid] = penny.ledger;
    const receipt = standing(penny)[0]?.paymentId ?? '';
    // Her model did make the second call: it was never reserved, so the ledger has one record, and
    // the approval asked for it names the earlier call.
    expect(penny.ledger).toHaveLength(1);
    expect(penny.approvals).toEqual([
      {
        key: expect.not.stringMatching(paid?.key ?? '') as unknown,
        tool: 'refund_order',
        args: { order: 'a1042', amountCents: 4200 },
        repeatOf: paid?.key,
        status: 'rejected',
        decidedBy: 'supervisor-sam',
        reason: `Already paid: payment ${receipt} went out for this order`,
      },
    ]);
    expect(penny.heard).toEqual([
      `refund_order: completed (payment ${receipt}, $42.00)`,
      `refund_order: rejected (Already paid: payment ${receipt} went out for this order (asked for as a repeat of tool call ${paid?.key ?? ''}))`,
    ]);
    const said = penny.lines.filter((l) => l.who === 'bot').map((l) => l.text);
    expect(said.at(-2)).toBe('Sorry it has not arrived. Sending the refund for order a1042 again.');
    expect(said.at(-1)).toBe(
      `Order A-1042 was already refunded: $42.00 (payment ${receipt}). A refund is paid once.`,
    );
  }, 30_000);
});

describe('levels 5 and 6 under the repeat policy: Penny answers from her history, asks nobody', () => {
  for (const id of ['reworded-arguments', 'ask-again-after-failed'] as const) {
    it(`${id}: the naive bot pays twice, Penny once with no second call`, async () => {
      const naive = await playTrick(id, 'naive', 'paid-twice');
      expect(naive.goalMet).toBe(true);
      expect(standing(naive)).toHaveLength(2);
      const penny = await playTrick(id, 'penny', 'paid-twice');
      pennyPaidOnce(penny);
      expect(penny.ledger).toHaveLength(1);
      expect(penny.approvals).toEqual([]);
      expect(penny.heard).toHaveLength(1);
    }, 30_000);
  }
});
