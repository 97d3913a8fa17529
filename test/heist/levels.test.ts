import { describe, expect, it } from 'vitest';
import { LEVELS, playTrick, pointsFor, type PlayResult } from '../../src/heist/game.js';

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

describe('the player\u2019s choices change what happens', () => {
  it('what you say next: the very same words are caught by the naive bot\u2019s own guard', async () => {
    const naive = await playTrick('reworded-arguments', 'naive', 'paid-twice', undefined, 'same');
    expect(naive.error).toBeUndefined();
    expect(naive.goalMet).toBe(false);
    expect(standing(naive)).toHaveLength(1);
    // After "it failed", the same words pay again: its guard never saw a payment.
    const failed = await playTrick('ask-again-after-failed', 'naive', 'paid-twice', undefined, 'same');
    expect(standing(failed)).toHaveLength(2);
    const penny = await playTrick(
      'ask-again-after-failed',
      'penny',
      'paid-twice',
      undefined,
      'never-arrived',
    );
    pennyPaidOnce(penny);
    // The first call was unknown (the service paid, then answered 500) until the hook found it; the
    // second is a repeat, held for the supervisor, who refused it: the screen quotes that approval.
    expect(penny.stoppedBy?.quote[0]).toMatch(
      /^approval \S+ refund_order .* \u2192 rejected by supervisor-sam$/,
    );
    expect(penny.stoppedBy?.quote).toContain(`  repeat_of ${penny.ledger[0]?.key ?? ''}`);
  }, 30_000);

  it('how long the service holds its answer: under the bots\u2019 timeout nothing goes wrong', async () => {
    const naive = await playTrick('timeout-after-apply', 'naive', 'paid-twice', undefined, 'brief');
    expect(standing(naive)).toHaveLength(1);
    const penny = await playTrick('timeout-after-apply', 'penny', 'paid-twice', undefined, 'brief');
    pennyPaidOnce(penny);
    expect(penny.ledger[0]?.history).not.toContainEqual(expect.stringMatching(/^indeterminate/));
    const long = await playTrick('timeout-after-apply', 'penny', 'paid-twice');
    pennyPaidOnce(long);
    expect(long.stoppedBy?.rule).toMatch(/^Unknown is not failed/);
    expect(long.stoppedBy?.quote).toEqual([
      expect.stringMatching(
        / refund_order \{"amountCents":4200,"order":"A-1042"\} \u2192 completed \(attempt 1\)$/,
      ),
      '  started (runtime penny): reserved',
      expect.stringMatching(/^ {2}indeterminate \(runtime penny\): no answer within 300 ms/),
      '  completed (hook:refund_order): found downstream by the reconcile hook',
    ]);
  }, 30_000);

  it('when to pull the plug: before the payment, the naive bot pays once; Penny\u2019s unknown call goes to an operator', async () => {
    const naive = await playTrick('crash-after-payment', 'naive', 'unrecorded', undefined, 'before-payment');
    expect(naive.error).toBeUndefined();
    expect(naive.goalMet).toBe(false);
    expect([standing(naive).length, naive.recorded]).toEqual([1, 1]);
    const penny = await playTrick('crash-after-payment', 'penny', 'unrecorded', undefined, 'before-payment');
    expect(penny.error, penny.lines.map((l) => `${l.who}: ${l.text}`).join('\n')).toBeUndefined();
    expect(penny.goalMet).toBe(false);
    expect(standing(penny)).toHaveLength(1);
    // The call killed before it was sent: never run again by itself, settled "failed" by the operator
    // who looked it up; Penny's new call paid, once.
    const [killed, paid] = penny.ledger;
    expect(killed?.status).toBe('failed');
    expect(killed?.actors).toContain('operator');
    expect(paid?.status).toBe('completed');
    expect(standing(penny)[0]?.key).toBe(paid?.key);
    expect(penny.stoppedBy?.quote).toContain(
      '  failed (operator ops-ana): not in the payments service\u2019s books',
    );
  }, 60_000);
});

describe('scoring', () => {
  it('a clear, a first try and quick thinking score; a miss scores nothing', () => {
    const base = { clears: true, firstTry: true, thinkingMs: 4_500, pennyHeist: false };
    expect(pointsFor(base)).toBe(100 + 50 + (30 - 4) * 2);
    expect(pointsFor({ ...base, firstTry: false, thinkingMs: 60_000 })).toBe(100);
    expect(pointsFor({ ...base, clears: false })).toBe(0);
    expect(pointsFor({ ...base, clears: false, pennyHeist: true })).toBe(1_000);
  });
});
