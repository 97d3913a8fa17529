import { z } from 'zod';
import { defineTool, executeToolCall, external, openLedger } from 'oncely';

// A downstream billing system that honours idempotency keys: a repeated key is not a second credit.
const credits = new Map<string, number>();

const issueCredit = defineTool({
  name: 'issue_credit',
  description: "Credit a customer's account",
  input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
  effect: external(), // one attempt; a timeout is recorded as unknown, never retried
  execute: ({ amountCents }, ctx) => {
    if (!credits.has(ctx.idempotencyKey)) credits.set(ctx.idempotencyKey, amountCents);
    return { receipt: `cr_${ctx.idempotencyKey}` };
  },
});

const ledger = await openLedger('sqlite:.oncely/quickstart.db'); // one file, migrated on open
const call = { tenantId: 'acme', runId: `run_${Date.now()}`, toolCallId: 'call_1' };
const args = { accountId: 'acct_7', amountCents: 2500 };

const first = await executeToolCall(ledger, issueCredit, args, call);
const replay = await executeToolCall(ledger, issueCredit, args, call); // a restart replaying the step
console.log(first.status, replay.status, replay.status === 'completed' ? replay.source : '-', credits.size);
// → completed completed ledger 1
await ledger.close();
