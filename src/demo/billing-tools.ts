import { z } from 'zod/v4';
import { ToolNotAttemptedError } from '../errors/index.js';
import { defineTool, external, type Tool } from '../tools/index.js';

export interface BillingToolsOptions {
  /** The billing service's base URL. */
  readonly billingUrl: string;
  /** The API token's state: an expired token makes the credit refuse before sending anything. */
  readonly token: { valid: boolean };
  /** How long a credit waits for the billing service before its outcome is unknown. */
  readonly timeoutMs: number;
}

/** The customer e-mails the demo "sent" (an outbox in memory), by idempotency key. */
export type Outbox = Map<string, { accountId: string; message: string }>;

interface CreditWire {
  readonly id: string;
  readonly account: string;
  readonly amount_cents: number;
}

/**
 * The demo's tools: `issue_credit` (the billing service honours its idempotency key; a reconcile hook
 * that looks the key up; a compensation that voids the credit) and `notify_customer` (needs an
 * operator's approval).
 */
export function billingTools(
  options: BillingToolsOptions,
  outbox: Outbox,
): { issueCredit: Tool; notifyCustomer: Tool } {
  const base = options.billingUrl;

  const issueCredit = defineTool({
    name: 'issue_credit',
    description: "Credit a customer's account, in cents",
    input: z.object({ accountId: z.string().min(1), amountCents: z.number().int().positive() }),
    effect: external(),
    timeoutMs: options.timeoutMs,
    async execute(args, context) {
      if (!options.token.valid) {
        throw new ToolNotAttemptedError(
          'the billing API token expired; refresh it, then the call can run again',
        );
      }
      const response = await fetch(`${base}/v1/credits`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': context.idempotencyKey },
        body: JSON.stringify({ account: args.accountId, amount_cents: args.amountCents }),
        signal: context.signal,
      });
      if (response.status >= 400 && response.status < 500) {
        throw new ToolNotAttemptedError(`the billing service refused the credit (HTTP ${response.status})`);
      }
      if (!response.ok) throw new Error(`the billing service answered HTTP ${response.status}`);
      const credit = (await response.json()) as CreditWire;
      return { creditId: credit.id, accountId: credit.account, amountCents: credit.amount_cents };
    },
    resultReference: (result) => result.creditId,
    async reconcile(record, context) {
      const url = `${base}/v1/credits?idempotency_key=${encodeURIComponent(record.idempotencyKey)}`;
      const response = await fetch(url, { signal: context.signal });
      if (!response.ok) return { status: 'unknown', reason: `lookup answered HTTP ${response.status}` };
      const { data } = (await response.json()) as { data: CreditWire[] };
      const credit = data[0];
      if (credit === undefined) {
        // Not there yet is not "never": the request may still be on its way. An operator decides.
        return { status: 'unknown', reason: 'no credit under this key (yet); it may still be on its way' };
      }
      return {
        status: 'completed',
        value: { creditId: credit.id, accountId: credit.account, amountCents: credit.amount_cents },
        resultReference: credit.id,
      };
    },
    async compensate(record, context) {
      if (record.resultReference === null)
        throw new ToolNotAttemptedError('no credit id was recorded to void');
      const response = await fetch(`${base}/v1/credits/${encodeURIComponent(record.resultReference)}/void`, {
        method: 'POST',
        signal: context.signal,
      });
      if (!response.ok) throw new Error(`the billing service answered HTTP ${response.status} to the void`);
      return { voided: record.resultReference };
    },
  });

  const notifyCustomer = defineTool({
    name: 'notify_customer',
    description: 'E-mail the customer about their account (an operator approves each message)',
    input: z.object({ accountId: z.string().min(1), message: z.string().min(1).max(2_000) }),
    effect: external({ approval: true }),
    execute(args, context) {
      if (!outbox.has(context.idempotencyKey)) outbox.set(context.idempotencyKey, args);
      return { sent: true };
    },
  });

  return { issueCredit, notifyCustomer };
}
