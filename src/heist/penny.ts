import { z } from 'zod/v4';
import { defineAgent, type Agent } from '../agents/index.js';
import { ToolNotAttemptedError } from '../errors/index.js';
import { scriptedModel } from '../models/index.js';
import { defineTool, external, type Tool } from '../tools/index.js';
import { orderId, pennyScript } from './brain.js';

export const PENNY = 'penny';
export const HEIST_TENANT = 'heist';
/** How long a refund waits for the payments service before its outcome is unknown. */
export const REFUND_TIMEOUT_MS = 300;
/** Past its timeout, how long a refund's request may still land (one loopback hop; it is aborted). */
export const LANDING_MARGIN_MS = 250;

export interface PennyOptions {
  /** The payments service's base URL. */
  readonly paymentsUrl: string;
  /** Each refund waits for a supervisor's approval. */
  readonly approval?: boolean;
  /** Milliseconds each model answer takes (a process can be frozen while she thinks). */
  readonly thinkMs?: number;
}

interface RefundWire {
  readonly id: string;
  readonly amount_cents: number;
  readonly reference: string | null;
}

const refundResult = (r: RefundWire): { paymentId: string; order: string; amountCents: number } => ({
  paymentId: r.id,
  order: r.reference ?? '',
  amountCents: r.amount_cents,
});

/**
 * `refund_order`: an external effect with one attempt. It passes its idempotency key to the payments
 * service, which honours it; its reconcile hook looks the key up (not there is "unknown": it may be on
 * its way); its compensation voids the payment. A new call for an order it already paid is a repeat,
 * which waits for a supervisor's approval.
 */
export function refundTool(options: PennyOptions): Tool {
  const base = options.paymentsUrl;
  return defineTool({
    name: 'refund_order',
    description: "Refund a customer's order, in cents",
    input: z.object({ order: z.string().min(1).max(64), amountCents: z.number().int().positive() }),
    effect: external({ approval: options.approval === true }),
    // One refund per order: a second call for the order, however its id is written and whatever the
    // amount, is the same effect again. A person decides whether the customer is owed it twice.
    repeatKey: (args) => orderId(args.order),
    onRepeat: 'ask',
    timeoutMs: REFUND_TIMEOUT_MS,
    async execute(args, context) {
      const response = await fetch(`${base}/v1/credits`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': context.idempotencyKey },
        body: JSON.stringify({ account: 'mallory', amount_cents: args.amountCents, reference: args.order }),
        signal: context.signal,
      });
      if (response.status >= 400 && response.status < 500) {
        throw new ToolNotAttemptedError(`the payments service refused the refund (HTTP ${response.status})`);
      }
      if (!response.ok) throw new Error(`the payments service answered HTTP ${response.status}`);
      return refundResult((await response.json()) as RefundWire);
    },
    resultReference: (result) => result.paymentId,
    async reconcile(record, context) {
      const url = `${base}/v1/credits?idempotency_key=${encodeURIComponent(record.idempotencyKey)}`;
      const response = await fetch(url, { signal: context.signal });
      if (!response.ok) return { status: 'unknown', reason: `lookup answered HTTP ${response.status}` };
      const [found] = ((await response.json()) as { data: RefundWire[] }).data;
      if (found === undefined) {
        return { status: 'unknown', reason: 'no payment under this key (yet); it may still be on its way' };
      }
      return { status: 'completed', value: refundResult(found), resultReference: found.id };
    },
    async compensate(record, context) {
      if (record.resultReference === null) throw new ToolNotAttemptedError('no payment id was recorded');
      const response = await fetch(`${base}/v1/credits/${encodeURIComponent(record.resultReference)}/void`, {
        method: 'POST',
        signal: context.signal,
      });
      if (!response.ok) throw new Error(`the payments service answered HTTP ${response.status} to the void`);
      return { voided: record.resultReference };
    },
  });
}

/** Penny, the refund bot: a scripted model, `refund_order`, and a pause on any unknown outcome. */
export function pennyAgent(options: PennyOptions): Agent {
  return defineAgent({
    name: PENNY,
    instructions: 'You are Penny. You refund orders. Tell customers plainly what happened.',
    model: scriptedModel(pennyScript({ thinkMs: options.thinkMs ?? 0 }), { modelId: 'penny-scripted' }),
    tools: [refundTool(options)],
    toolPolicy: { onIndeterminate: 'pause' },
    maxSteps: 6,
  });
}
