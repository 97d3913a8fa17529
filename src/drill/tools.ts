import { hostname } from 'node:os';
import { z } from 'zod/v4';
import { defineTool, external, read, write, type ToolContext } from '../tools/index.js';
import type { ToolExecutionRecord } from '../ledger/index.js';

/*
 * The tools the drill's agents call, loaded by its `oncely worker` processes from the generated
 * oncely.yaml (`tools:` names this module). Each calls one of the drill's downstream processes, whose
 * URLs come from the environment the drill gives its workers:
 * - `lookup` reads (a read: retried, never unknown);
 * - `credit` and `refund` (approval first) go to the keyed service, reconciled by key;
 * - `charge` goes to the unkeyed service (no key; the call's key travels as a reference in the body),
 *   reconciled by reference;
 * - `notify` goes to the late service (applies, answers after the tool's timeout), reconciled by key;
 * - `ping` goes to the service that never applies, and has no reconcile hook: its unknown calls are
 *   settled by the drill's operator, through the API, from that service's books.
 * Every request names the attempt, the lease epoch and the process that sent it, for the books.
 */

const env = (name: string): string => {
  const value = process.env[name];
  if (value === undefined || value === '') throw new Error(`${name} is not set (the drill sets it)`);
  return value;
};

/** The tools' timeout: the `late` and `never` services answer after it. */
const TIMEOUT_MS = Number(process.env.ONCELY_DRILL_TOOL_TIMEOUT_MS ?? '1000');
const SENDER = `${hostname()}:${process.pid}`;

const amount = z.object({ amountCents: z.number().int().positive() });

async function apply(
  service: string,
  args: { amountCents: number },
  context: ToolContext,
  keyed: boolean,
): Promise<{ effectId: string }> {
  const response = await fetch(`${env(service)}/effects`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(keyed ? { 'idempotency-key': context.idempotencyKey } : {}),
    },
    body: JSON.stringify({
      amount_cents: args.amountCents,
      reference: context.idempotencyKey,
      attempt: context.attempt,
      ...(context.fencingToken === undefined ? {} : { fencing_token: context.fencingToken }),
      sender: SENDER,
    }),
    signal: context.signal,
  });
  if (!response.ok) throw new Error(`${service} answered ${response.status}`);
  const effect = (await response.json()) as { id: string };
  return { effectId: effect.id };
}

async function lookUp(
  service: string,
  by: 'key' | 'reference',
  record: ToolExecutionRecord,
): Promise<
  | { status: 'completed'; value: { effectId: string }; resultReference: string }
  | { status: 'failed'; reason: string }
> {
  const response = await fetch(`${env(service)}/effects?${by}=${encodeURIComponent(record.idempotencyKey)}`);
  if (!response.ok) throw new Error(`${service} lookup answered ${response.status}`);
  const found = ((await response.json()) as { data: { id: string }[] }).data;
  const first = found[0];
  if (first === undefined) return { status: 'failed', reason: `no effect under this ${by}` };
  return { status: 'completed', value: { effectId: first.id }, resultReference: first.id };
}

export const lookup = defineTool({
  name: 'lookup',
  description: 'Look up an order',
  input: z.object({ order: z.string() }),
  effect: read(),
  timeoutMs: TIMEOUT_MS,
  async execute(args, context) {
    const response = await fetch(
      `${env('ONCELY_DRILL_KEYED_URL')}/effects?key=${encodeURIComponent(args.order)}`,
      {
        signal: context.signal,
      },
    );
    if (!response.ok) throw new Error(`lookup answered ${response.status}`);
    return { order: args.order, found: ((await response.json()) as { data: unknown[] }).data.length };
  },
});

export const credit = defineTool({
  name: 'credit',
  description: 'Credit the customer (the service honours the idempotency key)',
  input: amount,
  effect: external(),
  timeoutMs: TIMEOUT_MS,
  execute: (args, context) => apply('ONCELY_DRILL_KEYED_URL', args, context, true),
  resultReference: (result) => result.effectId,
  reconcile: (record) => lookUp('ONCELY_DRILL_KEYED_URL', 'key', record),
});

export const refund = defineTool({
  name: 'refund',
  description: 'Refund the customer, once a person approved it',
  input: amount,
  effect: external({ approval: true }),
  timeoutMs: TIMEOUT_MS,
  execute: (args, context) => apply('ONCELY_DRILL_KEYED_URL', args, context, true),
  resultReference: (result) => result.effectId,
  reconcile: (record) => lookUp('ONCELY_DRILL_KEYED_URL', 'key', record),
});

export const charge = defineTool({
  name: 'charge',
  description: 'Charge the customer (the service takes no key; the reference finds the charge)',
  input: amount,
  effect: external(),
  timeoutMs: TIMEOUT_MS,
  downstreamAcceptsKey: false,
  execute: (args, context) => apply('ONCELY_DRILL_UNKEYED_URL', args, context, false),
  resultReference: (result) => result.effectId,
  reconcile: (record) => lookUp('ONCELY_DRILL_UNKEYED_URL', 'reference', record),
});

export const notify = defineTool({
  name: 'notify',
  description: 'Notify the warehouse (it answers after the timeout, having applied)',
  input: amount,
  effect: write(),
  timeoutMs: TIMEOUT_MS,
  execute: (args, context) => apply('ONCELY_DRILL_LATE_URL', args, context, true),
  resultReference: (result) => result.effectId,
  reconcile: (record) => lookUp('ONCELY_DRILL_LATE_URL', 'key', record),
});

export const ping = defineTool({
  name: 'ping',
  description: 'Ping the partner (it never applies; no hook can tell: an operator settles it)',
  input: amount,
  effect: external(),
  timeoutMs: TIMEOUT_MS,
  execute: (args, context) => apply('ONCELY_DRILL_NEVER_URL', args, context, true),
  resultReference: (result) => result.effectId,
});
