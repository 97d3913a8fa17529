// What the snippets of the docs take as given (`<!-- snippet: given NAME, ... -->` before a block):
// real tools, a real SQLite ledger and runtime, and in-memory downstream services. The docs test
// (test/docs.test.ts) compiles it beside the snippets against the built package, and closes what it
// opened once a snippet has run (`closeGiven`).
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import {
  defineAgent,
  defineTool,
  external,
  openLedger,
  openRuntime,
  read,
  scriptedModel,
  type ReconcileHook,
} from 'oncely';

/** A billing service that honours idempotency keys: a repeated key is not a second credit. */
class Billing {
  readonly #credits = new Map<string, { id: string; accountId: string; amountCents: number }>();
  tokenValid(): Promise<boolean> {
    return Promise.resolve(true);
  }
  credit(
    args: { accountId: string; amountCents: number },
    options: { idempotencyKey: string; signal?: AbortSignal },
  ): Promise<{ id: string; accountId: string; amountCents: number }> {
    const credit = this.#credits.get(options.idempotencyKey) ?? {
      id: `cr_${this.#credits.size + 1}`,
      ...args,
    };
    this.#credits.set(options.idempotencyKey, credit);
    return Promise.resolve(credit);
  }
  refund(args: { orderId: string; amountCents: number }, options: { idempotencyKey: string }) {
    return this.credit({ accountId: args.orderId, amountCents: args.amountCents }, options);
  }
  findCredit(query: { idempotencyKey: string }) {
    return Promise.resolve(this.#credits.get(query.idempotencyKey));
  }
  voidCredit(
    creditId: string | null,
    _options: { idempotencyKey: string },
  ): Promise<{ voided: string | null }> {
    return Promise.resolve({ voided: creditId });
  }
}

/** A CRM whose address updates are last-writer-wins. */
class Crm {
  readonly addresses = new Map<string, string>();
  setAddress(
    accountId: string,
    address: string,
    _options: { fencingToken: number | undefined; runId: string },
  ): Promise<{ accountId: string }> {
    this.addresses.set(accountId, address);
    return Promise.resolve({ accountId });
  }
}

export const billing = new Billing();
export const crm = new Crm();

export const issueCredit = defineTool({
  name: 'issue_credit',
  description: "Credit a customer's account",
  input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
  effect: external(),
  execute: (args, ctx) => billing.credit(args, { idempotencyKey: ctx.idempotencyKey, signal: ctx.signal }),
});

export const lookupOrder = defineTool({
  name: 'lookup_order',
  description: 'Look up an order',
  input: z.object({ orderId: z.string() }),
  effect: read(),
  execute: ({ orderId }) => ({ orderId, status: 'delivered', totalCents: 2500 }),
});

/** How an MCP server's unknown credit is looked up: by its key, in the billing service. */
export const findCreditByKey: ReconcileHook = async (record) => {
  const credit = await billing.findCredit({ idempotencyKey: record.idempotencyKey });
  return credit === undefined ? { status: 'unknown' } : { status: 'completed', value: credit };
};

export const tenantId = 'acme';
export const runId = `run_${randomUUID()}`;
export const toolCallId = 'call_1';
export const args = { accountId: 'acct_7', amountCents: 2500 };

/** Agents that answer from a script: no network, no key. */
const talker = (name: string, text: string) =>
  defineAgent({ name, instructions: 'Answer.', model: scriptedModel([{ text }, { text }]), tools: [] });

export const ledger = await openLedger('sqlite:.oncely/given.db');
export const runtime = await openRuntime({
  databaseUrl: 'sqlite:.oncely/given.db',
  agents: [
    talker('penny', 'Sorry to hear that; I can refund it.'),
    talker('checker', 'ord_9 needs a refund.'),
    talker('crediter', 'Credited.'),
    talker('notifier', 'Told the customer.'),
    talker('wrapper', 'Order ord_9 settled.'),
  ],
});

/** Closes what the given world opened (after a snippet ran). */
export async function closeGiven(): Promise<void> {
  await runtime.close();
  await ledger.close();
}
