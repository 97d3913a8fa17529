// Your own AI SDK loop, made durable: responses recorded before tools run, calls keyed and guarded.
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { defineTool, external, isOncelyError, openLedger } from 'oncely';
import { durableLoop } from 'oncely/ai-sdk';

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

// Stands in for openai('gpt-4.1') or any AI SDK 6 model: it asks for one credit, then answers.
let asked = 0;
const model = new MockLanguageModelV3({
  doGenerate: ({ prompt }) => {
    asked += 1;
    const first = !prompt.some((m) => m.role === 'tool');
    const input = JSON.stringify({ accountId: 'acct_7', amountCents: 2500 });
    return Promise.resolve({
      content: first
        ? [{ type: 'tool-call' as const, toolCallId: 'call_1', toolName: 'issue_credit', input }]
        : [{ type: 'text' as const, text: 'Refunded $25.' }],
      finishReason: { unified: first ? ('tool-calls' as const) : ('stop' as const), raw: undefined },
      usage: {
        inputTokens: { total: 12, noCache: 12, cacheRead: undefined, cacheWrite: undefined },
        outputTokens: { total: 4, text: 4, reasoning: undefined },
      },
      warnings: [],
    });
  },
});

const ledger = await openLedger('sqlite:.oncely/ai-sdk-loop.db');
const runId = `refund_${Date.now()}`;
async function refund(): Promise<string> {
  const loop = durableLoop({ ledger, tenantId: 'acme', runId }); // the same runId continues the run
  try {
    const result = await loop.run(() =>
      generateText({
        model: loop.model(model), // each response recorded before its tools run; replayed on restart
        tools: loop.tools([issueCredit]), // each call guarded, keyed `<runId>:<toolCallId>`
        stopWhen: stepCountIs(5),
        prompt: 'Please refund order 42',
      }),
    );
    return result.text;
  } catch (error) {
    // An unknown call stops the loop; the model never hears "failed". Settle it, then run again.
    if (isOncelyError(error, 'RUN_CALL_UNKNOWN')) return `stopped: ${String(error.details?.idempotencyKey)}`;
    throw error;
  }
}

const first = await refund();
const again = await refund(); // a restart: both responses replayed, the credit not applied again
console.log(first, '|', again, '| model asked', asked, 'times | credits', credits.size);
// → Refunded $25. | Refunded $25. | model asked 2 times | credits 1
await ledger.close();
