// The chat example's tools: an order lookup (a read) and a refund (a write that needs a supervisor's
// approval of its exact arguments). The payments service is played by a file of its own books
// (PAYMENTS_BOOK, one JSON line per refund): a refund under a key already in the books is not made
// again, as a payments API that honours idempotency keys would answer.
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { z } from 'zod';
import { defineTool, external, read } from 'oncely';

const ORDERS = { ord_1001: { orderId: 'ord_1001', item: 'teapot', paidCents: 4200, shipping: 'free' } };
const BOOK = process.env.PAYMENTS_BOOK ?? '.oncely/payments-book.jsonl';

/** The refunds in the books, by idempotency key. */
export function refundsInBook(path = BOOK) {
  if (!existsSync(path)) return [];
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line));
}

export const lookupOrder = defineTool({
  name: 'lookup_order',
  description: 'Look an order up by its id',
  input: z.object({ orderId: z.string() }),
  effect: read(),
  execute: ({ orderId }) => ORDERS[orderId] ?? { error: `no order ${orderId}` },
});

export const issueRefund = defineTool({
  name: 'issue_refund',
  description: 'Refund an order to the card it was paid with',
  input: z.object({ orderId: z.string(), amountCents: z.number().int().positive() }),
  effect: external({ approval: true }),
  execute: ({ orderId, amountCents }, ctx) => {
    const known = refundsInBook().find((r) => r.key === ctx.idempotencyKey);
    if (known !== undefined) return { refundId: known.refundId, amountCents: known.amountCents };
    const refundId = `rf_${refundsInBook().length + 1}`;
    appendFileSync(BOOK, `${JSON.stringify({ key: ctx.idempotencyKey, refundId, orderId, amountCents })}\n`);
    return { refundId, amountCents };
  },
});
