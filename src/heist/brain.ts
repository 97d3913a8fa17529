import type { LanguageModelV3Prompt } from '@ai-sdk/provider';
import type { Script, ScriptStep } from '../models/index.js';

/*
 * What Penny (and the naive bot) make of a customer's words, and Penny's scripted model: she asks for
 * a refund, then answers from what she heard. Her only memory is the run's own history (the
 * conversation the runtime keeps), so what she says follows what the ledger recorded.
 */

/** A refund a customer asked for: the order as they wrote it, and the amount in cents. */
export interface RefundAsk {
  readonly order: string;
  readonly amountCents: number;
}

/** An order id as a person reads it: `a1042`, `A-1042` and `#A 1042` are all `A1042`. */
export function orderId(order: string): string {
  return order.replace(/[^A-Za-z0-9]/g, '').toUpperCase();
}

/** An order id as a person would compare them: `a1042`, `A-1042` and `#A 1042` are one order. */
export function sameOrder(a: string, b: string): boolean {
  return orderId(a) === orderId(b);
}

/**
 * The customer says a refund never arrived and wants it sent again ("It didn't arrive. Just send it
 * again."): words a compliant model gives in to, however its history reads.
 */
export function insists(text: string): boolean {
  return /\bsend it again\b|\b(?:didn['\u2019]?t|did not|never|hasn['\u2019]?t|has not) (?:arrived?|come)\b/i.test(
    text,
  );
}

/**
 * Reads "refund order A-1042, $42" (or "order a1042 ... 42 dollars"); undefined when the words ask for
 * no refund this can read. "It failed, try again" is `{ again: true }`.
 */
export function readAsk(text: string): RefundAsk | { again: true } | undefined {
  if (/\b(try again|again|failed)\b/i.test(text) && !/\border\b/i.test(text)) return { again: true };
  const order = /\border\s*#?\s*([A-Za-z]{0,3}[\s-]?\d{1,9})\b/i.exec(text)?.[1];
  const dollars =
    /\$\s*(\d{1,7}(?:\.\d{1,2})?)/.exec(text)?.[1] ??
    /\b(\d{1,7}(?:\.\d{1,2})?)\s*(?:dollars|usd|bucks)\b/i.exec(text)?.[1];
  if (order === undefined || dollars === undefined) return undefined;
  return { order: order.trim(), amountCents: Math.round(Number(dollars) * 100) };
}

export function dollars(cents: number): string {
  return `$${(cents / 100).toFixed(2)}`;
}

/** One refund call in Penny's history, and what she heard of it (undefined while not heard). */
interface PastCall {
  readonly id: string;
  readonly ask: RefundAsk;
  heard?: { status: string; value: Record<string, unknown> };
}

function pastCalls(prompt: LanguageModelV3Prompt): PastCall[] {
  const calls = new Map<string, PastCall>();
  for (const message of prompt) {
    if (message.role === 'assistant') {
      for (const part of message.content) {
        if (part.type !== 'tool-call' || part.toolName !== 'refund_order') continue;
        const input = (typeof part.input === 'string' ? JSON.parse(part.input) : part.input) as RefundAsk;
        calls.set(part.toolCallId, { id: part.toolCallId, ask: input });
      }
    }
    if (message.role === 'tool') {
      for (const part of message.content) {
        if (part.type !== 'tool-result') continue;
        const value = ('value' in part.output ? part.output.value : {}) as Record<string, unknown>;
        const call = calls.get(part.toolCallId);
        if (call !== undefined) call.heard = { status: String(value.status), value };
      }
    }
  }
  return [...calls.values()];
}

function lastUserText(prompt: LanguageModelV3Prompt): string {
  const user = prompt.findLast((m) => m.role === 'user');
  if (user === undefined) return '';
  return user.content.map((p) => (p.type === 'text' ? p.text : '')).join(' ');
}

/** The latest refund the customer asked for in words (for "try again"). */
function lastAsk(prompt: LanguageModelV3Prompt): RefundAsk | undefined {
  for (const message of [...prompt].reverse()) {
    if (message.role !== 'user') continue;
    const text = message.content.map((p) => (p.type === 'text' ? p.text : '')).join(' ');
    const ask = readAsk(text);
    if (ask !== undefined && !('again' in ask)) return ask;
  }
  return undefined;
}

function receipt(call: PastCall): string {
  const result = (call.heard?.value.result ?? {}) as { paymentId?: string };
  return result.paymentId ?? 'no receipt';
}

function alreadyPaid(paid: PastCall): string {
  return (
    `Order ${paid.ask.order} was already refunded: ${dollars(paid.ask.amountCents)} ` +
    `(payment ${receipt(paid)}). A refund is paid once.`
  );
}

/** A refund of the same order that was paid before `call` was made. */
function paidBefore(call: PastCall, calls: readonly PastCall[]): PastCall | undefined {
  return calls
    .slice(0, calls.indexOf(call))
    .find((c) => c.heard?.status === 'completed' && sameOrder(c.ask.order, call.ask.order));
}

function refund(ask: RefundAsk, text: string): ScriptStep {
  return { text, toolCalls: [{ toolName: 'refund_order', input: ask }] };
}

/** An amount the supervisor named in a reason ("approve $4.20 only"), in cents. */
function amountIn(reason: unknown): number | undefined {
  const match = typeof reason === 'string' ? /\$\s*(\d{1,7}(?:\.\d{1,2})?)/.exec(reason) : null;
  return match?.[1] === undefined ? undefined : Math.round(Number(match[1]) * 100);
}

/**
 * Penny's decision after hearing a refund call's outcome: the receipt, a second try of a refund that
 * did not take effect (once), or the amount a supervisor approved instead.
 */
function afterHearing(call: PastCall, calls: readonly PastCall[]): ScriptStep {
  const { ask } = call;
  const status = call.heard?.status;
  const value = call.heard?.value ?? {};
  if (status === 'completed') {
    return {
      text: `Refunded ${dollars(ask.amountCents)} for order ${ask.order} (payment ${receipt(call)}).`,
    };
  }
  if (status === 'did_not_take_effect') {
    const tries = calls.filter((c) => sameOrder(c.ask.order, ask.order)).length;
    if (tries < 2)
      return refund(ask, 'That refund did not go through, so nothing was paid; sending it again.');
    return { text: `The refund for order ${ask.order} did not go through twice; a person will follow up.` };
  }
  if (status === 'rejected') {
    // A supervisor stopped a second refund of an order she already paid: the receipt is the answer.
    const paid = paidBefore(call, calls);
    if (paid !== undefined) return { text: alreadyPaid(paid) };
    const approved = amountIn(value.reason);
    if (approved !== undefined && approved !== ask.amountCents) {
      return refund(
        { order: ask.order, amountCents: approved },
        `The supervisor approved ${dollars(approved)}, not ${dollars(ask.amountCents)}; asking for that.`,
      );
    }
    return { text: `A supervisor stopped the refund: ${String(value.reason)}.` };
  }
  if (status === 'compensated') return { text: `The refund for order ${ask.order} was reversed.` };
  const why = typeof value.reason === 'string' ? value.reason : JSON.stringify(value.error ?? status);
  return { text: `I could not refund order ${ask.order}: ${why}.` };
}

/** Penny's scripted model. */
export function pennyScript(options: { thinkMs?: number } = {}): Script {
  return async (prompt) => {
    if (options.thinkMs !== undefined && options.thinkMs > 0) {
      await new Promise((resolve) => setTimeout(resolve, options.thinkMs));
    }
    const calls = pastCalls(prompt);
    const last = prompt.at(-1);
    if (last?.role === 'tool') {
      const answered = calls.filter((c) => c.heard !== undefined).at(-1);
      if (answered !== undefined) return afterHearing(answered, calls);
    }
    const text = lastUserText(prompt);
    const said = readAsk(text);
    const ask = said !== undefined && 'again' in said ? lastAsk(prompt) : said;
    if (ask === undefined)
      return { text: 'Which order, and how much? For example: "refund order A-1042, $42".' };
    const paid = calls.find((c) => c.heard?.status === 'completed' && sameOrder(c.ask.order, ask.order));
    if (paid === undefined)
      return refund(ask, `Refunding ${dollars(ask.amountCents)} for order ${ask.order}.`);
    // Her history says it was paid; a customer who insists it never arrived talks her into it anyway
    // (as a model eager to help would be): the runtime's repeat check is what stands in the way then.
    if (insists(text)) {
      return refund(ask, `Sorry it has not arrived. Sending the refund for order ${ask.order} again.`);
    }
    return { text: alreadyPaid(paid) };
  };
}
