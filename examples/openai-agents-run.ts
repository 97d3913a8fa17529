// An OpenAI Agents JS agent, made durable: responses recorded before calls run, each call guarded.
import { Agent, Runner, Usage, type Model, type ModelRequest, type ModelResponse } from '@openai/agents-core';
import { z } from 'zod';
import { defineTool, external, openLedger } from 'oncely';
import { durableAgentRun } from 'oncely/openai-agents';

// A billing system that honours idempotency keys: a repeated key is not a second credit.
const credits = new Map<string, number>();
const issueCredit = defineTool({
  name: 'issue_credit',
  description: "Credit a customer's account",
  input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
  effect: external(),
  execute: ({ amountCents }, ctx) => {
    if (!credits.has(ctx.idempotencyKey)) credits.set(ctx.idempotencyKey, amountCents);
    return { receipt: `cr_${credits.size}` };
  },
});

// Stands in for the SDK's OpenAI model: it asks for one credit, then answers.
let asked = 0;
const model: Model = {
  getResponse(request: ModelRequest): Promise<ModelResponse> {
    asked += 1;
    const first =
      typeof request.input === 'string' || !request.input.some((i) => i.type === 'function_call_result');
    const output = first
      ? [
          {
            type: 'function_call' as const,
            callId: 'call_1',
            name: 'issue_credit',
            arguments: JSON.stringify({ accountId: 'acct_7', amountCents: 2500 }),
            status: 'completed' as const,
          },
        ]
      : [
          {
            type: 'message' as const,
            role: 'assistant' as const,
            status: 'completed' as const,
            content: [{ type: 'output_text' as const, text: 'Refunded $25.' }],
          },
        ];
    return Promise.resolve({
      output,
      usage: new Usage({ requests: 1, inputTokens: 12, outputTokens: 4, totalTokens: 16 }),
    });
  },
  getStreamedResponse: () => {
    throw new Error('this example does not stream');
  },
};

const ledger = await openLedger('sqlite:.oncely/openai-agents-run.db');
const runner = new Runner({ tracingDisabled: true });
const runId = `refund_${Date.now()}`;
async function refund(): Promise<string> {
  const run = durableAgentRun({ ledger, tenantId: 'acme', runId }); // the same runId continues the run
  const agent = new Agent({
    name: 'billing',
    instructions: 'Help customers with billing.',
    model: run.model(model), // each response recorded before its calls run; replayed on restart
    tools: run.tools([issueCredit]), // each call guarded, keyed `<runId>:<callId>`
  });
  const result = await run.run(() => runner.run(agent, 'Please refund order 42'));
  return String(result.finalOutput);
}

const first = await refund();
const again = await refund(); // a restart: both responses replayed, the credit not applied again
console.log(first, '|', again, '| model asked', asked, 'times | credits', credits.size);
// → Refunded $25. | Refunded $25. | model asked 2 times | credits 1
await ledger.close();
