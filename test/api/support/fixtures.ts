import { z } from 'zod';
import { defineAgent, type Agent } from '../../../src/agents/index.js';
import { scriptedModel } from '../../../src/models/index.js';
import { defineTool, external, write, type Tool, type ToolContext } from '../../../src/tools/index.js';

/** A downstream system the test can look into: every effect and every undo, by key. */
export class Downstream {
  readonly credits: string[] = [];
  readonly refunds: string[] = [];
  /** Executions of `slow_write` waiting for `release()`. */
  readonly #waiting: (() => void)[] = [];

  /** Lets every `slow_write` execution that timed out finish now (its late outcome). */
  release(): void {
    for (let go = this.#waiting.shift(); go !== undefined; go = this.#waiting.shift()) go();
  }

  hold(): Promise<void> {
    return new Promise((resolve) => this.#waiting.push(resolve));
  }
}

const amount = z.object({ accountId: z.string(), amountCents: z.number().int().positive() });

export interface Fixtures {
  readonly downstream: Downstream;
  readonly tools: {
    readonly credit: Tool;
    readonly slowWrite: Tool;
    readonly approvedCredit: Tool;
    readonly checkedCredit: Tool;
  };
  readonly agents: readonly Agent[];
}

/**
 * Tools and agents for API tests: `issue_credit` (an external call with a compensation hook),
 * `slow_write` (a write that outlives its 100 ms timeout until released, so its call is
 * indeterminate and its late outcome arrives when the test says), and `approved_credit` (waits for
 * an operator's approval). Each agent makes one call, then answers; `repeat-agent` makes the same
 * credit twice (the second a repeat, which waits for an approval).
 */
export function apiFixtures(): Fixtures {
  const downstream = new Downstream();
  const credit = defineTool({
    name: 'issue_credit',
    description: "Credit a customer's account",
    input: amount,
    effect: external(),
    execute: (_args, ctx: ToolContext) => {
      downstream.credits.push(ctx.idempotencyKey);
      return { receipt: `cr_${ctx.idempotencyKey}` };
    },
    resultReference: (value: { receipt: string }) => value.receipt,
    compensate: async (record, ctx) => {
      downstream.refunds.push(ctx.idempotencyKey);
      await new Promise((resolve) => setTimeout(resolve, 20)); // long enough for two requests to overlap
      return { refunded: record.idempotencyKey };
    },
  });
  const slowWrite = defineTool({
    name: 'slow_write',
    description: 'Change an owner; answers only when released, after its timeout',
    input: z.object({ accountId: z.string() }),
    effect: write(),
    timeoutMs: 100,
    execute: async (_args, ctx: ToolContext) => {
      await downstream.hold();
      downstream.credits.push(ctx.idempotencyKey);
      return { changed: true };
    },
  });
  const approvedCredit = defineTool({
    name: 'approved_credit',
    description: 'Credit an account once an operator approves',
    input: amount,
    effect: external({ approval: true }),
    execute: (_args, ctx: ToolContext) => {
      downstream.credits.push(ctx.idempotencyKey);
      return { receipt: `ap_${ctx.idempotencyKey}` };
    },
  });
  // A credit whose reconcile hook looks its key up in the books: found, it took effect; else unknown.
  const checkedCredit = defineTool({
    name: 'checked_credit',
    description: 'Credit an account; its reconcile hook looks the key up in the billing books',
    input: amount,
    effect: external(),
    downstream: 'billing',
    execute: (_args, ctx: ToolContext) => {
      downstream.credits.push(ctx.idempotencyKey);
      return { receipt: `ck_${ctx.idempotencyKey}` };
    },
    reconcile: (record) =>
      downstream.credits.includes(record.idempotencyKey)
        ? {
            status: 'completed',
            value: { receipt: `ck_${record.idempotencyKey}` },
            resultReference: `ck_${record.idempotencyKey}`,
          }
        : { status: 'unknown', reason: `no credit under ${record.idempotencyKey} in the books yet` },
  });
  const oneCall = (name: string, tool: Tool, input: unknown, pause = false): Agent =>
    defineAgent({
      name,
      instructions: 'Do the one thing asked.',
      model: scriptedModel([{ toolCalls: [{ toolName: tool.name, input }] }, { text: 'Done.' }]),
      tools: [tool],
      ...(pause ? { toolPolicy: { onIndeterminate: 'pause' as const } } : {}),
    });
  const args = { accountId: 'acct_1', amountCents: 2500 };
  return {
    downstream,
    tools: { credit, slowWrite, approvedCredit, checkedCredit },
    agents: [
      oneCall('credit-agent', credit, args),
      oneCall('slow-agent', slowWrite, { accountId: 'acct_1' }, true),
      oneCall('approval-agent', approvedCredit, args),
      oneCall('checked-agent', checkedCredit, args),
      // The same credit twice: the second call repeats the first, so it waits for an approval.
      defineAgent({
        name: 'repeat-agent',
        instructions: 'Credit acct_1 $25.',
        model: scriptedModel([
          { toolCalls: [{ toolName: 'issue_credit', input: args }] },
          { toolCalls: [{ toolName: 'issue_credit', input: args }] },
          { text: 'Done.' },
        ]),
        tools: [credit],
      }),
      // Every turn: one credit, then an answer; each response reports its tokens.
      defineAgent({
        name: 'chat-agent',
        instructions: 'Credit what the customer asks, one credit a message.',
        model: scriptedModel((_prompt, turn) =>
          turn % 2 === 0
            ? {
                toolCalls: [
                  { toolName: 'issue_credit', input: { accountId: 'acct_1', amountCents: 100 * (turn + 1) } },
                ],
                usage: { inputTokens: 100, outputTokens: 10 },
              }
            : { text: `Credited, turn ${(turn + 1) / 2}.`, usage: { inputTokens: 150, outputTokens: 5 } },
        ),
        tools: [credit],
      }),
      // Streams its answers a word at a time (20 ms apart): a credit, then the final text.
      defineAgent({
        name: 'stream-agent',
        instructions: 'Credit acct_1, saying what you do.',
        model: scriptedModel(
          [
            {
              text: 'Let me credit that for you now.',
              toolCalls: [{ toolName: 'issue_credit', input: { accountId: 'acct_1', amountCents: 100 } }],
            },
            { text: 'Done: I credited one dollar to acct_1 just now.' },
          ],
          { chunkDelayMs: 20 },
        ),
        tools: [credit],
        stream: true,
      }),
    ],
  };
}
