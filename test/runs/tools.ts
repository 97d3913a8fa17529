import { z } from 'zod';
import type { ScriptStep } from '../../src/models/index.js';
import { ToolNotAttemptedError } from '../../src/errors/index.js';
import type { JsonValue, RepeatPolicy, ToolExecutionRecord } from '../../src/ledger/index.js';
import {
  defineTool,
  destructive,
  external,
  read,
  write,
  type ReconcileHook,
  type Tool,
  type ToolContext,
} from '../../src/tools/index.js';

/*
 * The world the run-loop tests' tools act on: a fake downstream service that honours the idempotency
 * key and counts effects per key, and tools of every effect kind, each counting its executions.
 */

/**
 * A downstream service in memory (a billing API) that honours the idempotency key: the first request
 * with a key takes effect, a repeat returns the first answer and changes nothing. It counts requests
 * and effects per key, so a test can prove each key took effect once.
 */
export class FakeDownstream {
  readonly #effects = new Map<string, number>();
  readonly #requests = new Map<string, number>();
  readonly #results = new Map<string, JsonValue>();
  #receipts = 0;

  /** A request carrying `key`: takes effect unless the key was seen, and answers either way. */
  apply(key: string, body: Record<string, JsonValue>): JsonValue {
    this.#requests.set(key, (this.#requests.get(key) ?? 0) + 1);
    const known = this.#results.get(key);
    if (known !== undefined) return known;
    this.#effects.set(key, (this.#effects.get(key) ?? 0) + 1);
    const result = { receipt: `rcpt_${++this.#receipts}`, ...body };
    this.#results.set(key, result);
    return result;
  }

  /** Looks a key up, changing nothing (what a reconcile hook does). */
  find(key: string): JsonValue | undefined {
    return this.#results.get(key);
  }

  /** Undoes the effect of `key` (what a compensation does); counted per compensated key. */
  readonly undone = new Map<string, number>();
  undo(key: string): JsonValue {
    this.undone.set(key, (this.undone.get(key) ?? 0) + 1);
    return { reversed: key };
  }

  effectsOf(key: string): number {
    return this.#effects.get(key) ?? 0;
  }

  requestsOf(key: string): number {
    return this.#requests.get(key) ?? 0;
  }

  /** Every key that took effect, with its count. */
  effects(): Record<string, number> {
    return Object.fromEntries(this.#effects);
  }
}

/** A tool and the keys of every execution that really ran (its `execute` was called). */
export interface CountedTool {
  readonly tool: Tool;
  readonly executions: string[];
  executionsOf(key: string): number;
}

function counted(tool: (executions: string[]) => Tool): CountedTool {
  const executions: string[] = [];
  return {
    tool: tool(executions),
    executions,
    executionsOf: (key) => executions.filter((k) => k === key).length,
  };
}

/** The arguments the tests' models ask with. */
export const ORDER = { orderId: 'ord_1' };
export const CREDIT = { accountId: 'acct_7', amountCents: 2500 };
export const OWNER = { accountId: 'acct_7', owner: 'dana' };

/** A script of one step asking for `issue_credit` and `change_owner` in parallel, then `final`. */
export function creditAndOwnerSteps(final: string): ScriptStep[] {
  return [
    {
      toolCalls: [
        { toolName: 'issue_credit', input: CREDIT },
        { toolName: 'change_owner', input: OWNER },
      ],
    },
    { text: final },
  ];
}

const OrderArgs = z.object({ orderId: z.string() });
const CreditArgs = z.object({ accountId: z.string(), amountCents: z.number().int().positive() });
const OwnerArgs = z.object({ accountId: z.string(), owner: z.string() });
const RecordArgs = z.object({ recordId: z.string() });

/** A reconcile hook that looks the key up downstream: found is completed, missing is failed. */
export function lookUpDownstream(downstream: FakeDownstream): ReconcileHook {
  return (record) => {
    const found = downstream.find(record.idempotencyKey);
    return found === undefined
      ? { status: 'failed', reason: 'no request with this key reached the service' }
      : { status: 'completed', value: found };
  };
}

/** `lookup_order`, a read. `fail`: every try throws; `notAttempted`: refuses before sending. */
export function lookupOrder(options: { fail?: string } = {}): CountedTool {
  return counted((executions) =>
    defineTool({
      name: 'lookup_order',
      description: 'Look up an order',
      input: OrderArgs,
      effect: read({ attempts: 2, baseDelayMs: 1, maxDelayMs: 5 }),
      timeoutMs: 1_000,
      execute: (args, ctx) => {
        executions.push(ctx.idempotencyKey);
        if (options.fail !== undefined) throw new Error(options.fail);
        return { orderId: args.orderId, status: 'delivered', amountCents: 2500 };
      },
    }),
  );
}

export interface CreditOptions {
  readonly name?: string;
  readonly approval?: boolean;
  readonly reconcile?: boolean;
  readonly compensate?: boolean;
  /** Throws `ToolNotAttemptedError` with this message, before sending anything. */
  readonly notAttempted?: string;
  /** A stricter schema: amounts above this are refused as invalid arguments. */
  readonly maxAmountCents?: number;
  /** A schema that fills in a currency: the same input parses to other arguments (another digest). */
  readonly currency?: string;
  /** Runs inside `execute` before the request is sent (to look at the run, or to wait). */
  readonly before?: (ctx: ToolContext) => Promise<void> | void;
  /** Runs inside `execute` after the request took effect downstream. */
  readonly after?: (ctx: ToolContext) => Promise<void> | void;
  /** Takes an optional `memo` too (words that do not change the effect). */
  readonly memo?: boolean;
  readonly repeatKey?: (args: Record<string, JsonValue>) => unknown;
  readonly onRepeat?: RepeatPolicy;
  readonly repeatWindowMs?: number;
}

function creditArgs(options: CreditOptions): z.ZodType<Record<string, JsonValue>> {
  if (options.memo === true) return CreditArgs.extend({ memo: z.string().optional() });
  if (options.currency !== undefined)
    return CreditArgs.extend({ currency: z.string().default(options.currency) });
  if (options.maxAmountCents === undefined) return CreditArgs;
  return CreditArgs.extend({ amountCents: z.number().int().positive().max(options.maxAmountCents) });
}

/** `issue_credit`, an external call that passes its key to the downstream service. */
export function issueCredit(downstream: FakeDownstream, options: CreditOptions = {}): CountedTool {
  return counted((executions) =>
    defineTool({
      name: options.name ?? 'issue_credit',
      description: "Credit a customer's account",
      input: creditArgs(options),
      effect: external({ approval: options.approval ?? false }),
      timeoutMs: 2_000,
      ...(options.reconcile === true ? { reconcile: lookUpDownstream(downstream) } : {}),
      ...(options.compensate === true
        ? { compensate: (record: ToolExecutionRecord) => downstream.undo(record.idempotencyKey) }
        : {}),
      resultReference: (value: unknown) => (value as { receipt?: string } | null)?.receipt ?? null,
      ...(options.repeatKey === undefined ? {} : { repeatKey: options.repeatKey }),
      ...(options.onRepeat === undefined ? {} : { onRepeat: options.onRepeat }),
      ...(options.repeatWindowMs === undefined ? {} : { repeatWindowMs: options.repeatWindowMs }),
      execute: async (args, ctx) => {
        executions.push(ctx.idempotencyKey);
        if (options.notAttempted !== undefined) throw new ToolNotAttemptedError(options.notAttempted);
        await options.before?.(ctx);
        const result = downstream.apply(ctx.idempotencyKey, { ...args });
        await options.after?.(ctx);
        return result;
      },
    }),
  );
}

export interface SlowWriteOptions {
  /** The request reached the service before the answer was lost (the effect happened). */
  readonly applies: boolean;
  /** `true`: look the key up downstream; or a hook of the test's own. */
  readonly reconcile?: boolean | ReconcileHook;
  /**
   * `honours`: gives up when the signal aborts (the late outcome stays unknown). `release`: ignores
   * the signal and answers when this promise resolves (a late outcome).
   */
  readonly release?: Promise<void>;
  /** Executions from this one on (1, 2, …) answer at once, taking effect: the service recovered. */
  readonly answersFrom?: number;
}

/**
 * `change_owner`, a write whose answer never comes in time: it times out after 50 ms, so its
 * outcome is unknown (`indeterminate`).
 */
export function changeOwner(downstream: FakeDownstream, options: SlowWriteOptions): CountedTool {
  return counted((executions) =>
    defineTool({
      name: 'change_owner',
      description: "Change an account's owner",
      input: OwnerArgs,
      effect: write(),
      timeoutMs: 50,
      ...(options.reconcile === true ? { reconcile: lookUpDownstream(downstream) } : {}),
      ...(typeof options.reconcile === 'function' ? { reconcile: options.reconcile } : {}),
      execute: async (args, ctx) => {
        executions.push(ctx.idempotencyKey);
        if (executions.length >= (options.answersFrom ?? Infinity)) {
          return downstream.apply(ctx.idempotencyKey, { ...args });
        }
        if (options.release !== undefined) {
          await options.release;
          return downstream.apply(ctx.idempotencyKey, { ...args });
        }
        if (options.applies) downstream.apply(ctx.idempotencyKey, { ...args });
        await new Promise((_, reject) =>
          ctx.signal.addEventListener('abort', () => reject(new Error('connection reset')), { once: true }),
        );
        return null;
      },
    }),
  );
}

/** `delete_record`, a destructive call that needs an operator's approval. */
export function deleteRecord(downstream: FakeDownstream): CountedTool {
  return counted((executions) =>
    defineTool({
      name: 'delete_record',
      description: 'Delete a customer record',
      input: RecordArgs,
      effect: destructive({ approval: true }),
      timeoutMs: 2_000,
      execute: (args, ctx) => {
        executions.push(ctx.idempotencyKey);
        return downstream.apply(ctx.idempotencyKey, { deleted: args.recordId });
      },
    }),
  );
}
