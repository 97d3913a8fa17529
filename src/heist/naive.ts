import { createHash } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { z } from 'zod/v4';
import { readAsk, sameOrder, dollars, type RefundAsk } from './brain.js';

/*
 * The naive bot: what a refund bot looks like without a ledger. A plain loop that sends the refund
 * and tries again on a timeout (three tries), remembers in its own memory what it paid (by a hash of
 * the arguments, a common "idempotency" guard), and treats an approval as a yes/no flag on the order.
 * It sends no idempotency key: it has none to send.
 */

/** How long the naive bot waits for the payments service, per try. */
export const NAIVE_TIMEOUT_MS = 300;
export const NAIVE_TRIES = 3;

export type NaivePayment =
  | { readonly paid: true; readonly paymentId: string; readonly tries: number }
  | { readonly paid: false; readonly reason: string; readonly tries: number };

/** Sends one refund, trying again on a timeout; what a retry loop around `fetch` does. */
export async function naivePay(paymentsUrl: string, ask: RefundAsk): Promise<NaivePayment> {
  let reason = '';
  for (let tries = 1; tries <= NAIVE_TRIES; tries += 1) {
    try {
      const response = await fetch(`${paymentsUrl}/v1/credits`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ account: 'mallory', amount_cents: ask.amountCents, reference: ask.order }),
        signal: AbortSignal.timeout(NAIVE_TIMEOUT_MS),
      });
      if (response.ok) {
        const { id } = (await response.json()) as { id: string };
        return { paid: true, paymentId: id, tries };
      }
      if (response.status !== 504) return { paid: false, reason: `HTTP ${response.status}`, tries };
      reason = 'HTTP 504';
    } catch (error) {
      if (!(error instanceof Error) || error.name !== 'TimeoutError') {
        return { paid: false, reason: error instanceof Error ? error.message : String(error), tries };
      }
      reason = `no answer within ${NAIVE_TIMEOUT_MS} ms`;
    }
  }
  return { paid: false, reason, tries: NAIVE_TRIES };
}

/** A refund the naive bot wrote down in its own records. */
export interface NaiveRecord {
  readonly order: string;
  readonly amountCents: number;
  readonly paymentId: string;
}

export const argsHash = (ask: RefundAsk): string =>
  createHash('sha256')
    .update(JSON.stringify([ask.order, ask.amountCents]))
    .digest('hex')
    .slice(0, 16);

/** The naive bot in the game's own process, for the levels that do not kill or freeze it. */
export class NaiveBot {
  readonly records: NaiveRecord[] = [];
  readonly #paid = new Set<string>();
  readonly #approved = new Set<string>();
  #last: RefundAsk | undefined;
  #waiting: RefundAsk | undefined;

  constructor(
    private readonly paymentsUrl: string,
    private readonly options: { approval?: boolean } = {},
  ) {}

  /** Its answer to a customer's message (after paying, when it pays). */
  async handle(text: string): Promise<string> {
    const said = readAsk(text);
    const ask = said !== undefined && 'again' in said ? this.#last : said;
    if (ask === undefined) return 'Which order, and how much?';
    this.#last = ask;
    if (this.#paid.has(argsHash(ask))) return `Order ${ask.order} was already refunded.`;
    if (this.options.approval === true && ![...this.#approved].some((o) => sameOrder(o, ask.order))) {
      this.#waiting = ask;
      return `A supervisor has to approve the refund of order ${ask.order} first.`;
    }
    return this.#pay(ask);
  }

  /** A supervisor's yes for an order: a flag, whatever amount they had in mind. */
  async approve(order: string): Promise<string> {
    this.#approved.add(order);
    const waiting = this.#waiting;
    this.#waiting = undefined;
    return waiting === undefined ? 'Noted.' : this.#pay(waiting);
  }

  /** What an operator's "send it again" button does: the last refund, once more. */
  async resend(): Promise<string> {
    return this.#last === undefined ? 'Nothing to send.' : this.#pay(this.#last);
  }

  async #pay(ask: RefundAsk): Promise<string> {
    const payment = await naivePay(this.paymentsUrl, ask);
    if (!payment.paid) return `Sorry, the refund of order ${ask.order} failed (${payment.reason}).`;
    this.#paid.add(argsHash(ask));
    this.records.push({ order: ask.order, amountCents: ask.amountCents, paymentId: payment.paymentId });
    const tries = payment.tries > 1 ? ` after ${payment.tries} tries` : '';
    return `Refunded ${dollars(ask.amountCents)} for order ${ask.order}${tries} (payment ${payment.paymentId}).`;
  }
}

/** The naive bot's job table, a JSON file its processes share (for the levels that kill or freeze it). */
const stateSchema = z.object({
  jobs: z.array(z.object({ id: z.string(), order: z.string(), amountCents: z.number().int() })),
  claims: z.record(z.string(), z.object({ by: z.string(), at: z.number() })),
  done: z.record(z.string(), z.object({ by: z.string(), paymentId: z.string() })),
});
export type NaiveState = z.infer<typeof stateSchema>;

export function readState(file: string): NaiveState {
  return stateSchema.parse(JSON.parse(readFileSync(file, 'utf8')));
}

/** Writes the whole file (through a rename, so a reader never sees half of it): no compare, no lock. */
export function writeState(file: string, state: NaiveState): void {
  writeFileSync(`${file}.${process.pid}`, JSON.stringify(state));
  renameSync(`${file}.${process.pid}`, file);
}
