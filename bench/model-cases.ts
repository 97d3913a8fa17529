import type { LanguageModelV3, LanguageModelV3GenerateResult } from '@ai-sdk/provider';
import { generateText, jsonSchema, stepCountIs, tool as sdkTool, type ModelMessage, type ToolSet } from 'ai';
import { z } from 'zod';
import { ModelPrompt, callModel, defineTool, read } from '../src/index.js';
import type { BenchCase } from './case.js';

/*
 * The model call's own overhead, without the model: a model that answers at once, called on a
 * conversation of 0, 16 or 48 KiB that grows by one step (a response with a call, and its result)
 * at every operation, as a run's does. oncely's call (`callModel` with the run's `ModelPrompt`, which
 * does not check again the messages the driver built) beside the AI SDK's `generateText` on the
 * same conversation, which validates and converts all of it on every call.
 */

const SCALE = Number(process.env.BENCH_SCALE ?? 1);
const OPS = Math.max(10, Math.round(100 * SCALE));

const lookup = defineTool({
  name: 'lookup_order',
  description: 'Look up an order',
  input: z.object({ orderId: z.string() }),
  effect: read(),
  execute: (args) => ({ orderId: args.orderId }),
});

/** A model that answers at once, with nothing to parse: what remains is the call's own work. */
const instantModel: LanguageModelV3 = {
  specificationVersion: 'v3',
  provider: 'bench',
  modelId: 'instant',
  supportedUrls: {},
  doGenerate: (): Promise<LanguageModelV3GenerateResult> =>
    Promise.resolve({
      content: [{ type: 'text', text: 'done' }],
      finishReason: { unified: 'stop', raw: 'stop' },
      usage: {
        inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
        outputTokens: { total: 1, text: 1, reasoning: undefined },
      },
      warnings: [],
    }),
  doStream: () => Promise.reject(new Error('the bench model does not stream')),
};

/** One step as a run records it: a response with one call, then its result (about 300 bytes). */
function step(n: number): ModelMessage[] {
  const toolCallId = `call_${n.toString(16).padStart(16, '0')}`;
  return [
    {
      role: 'assistant',
      content: [
        { type: 'text', text: 'Let me look that order up.' },
        { type: 'tool-call', toolCallId, toolName: lookup.name, input: { orderId: `o_${n}` } },
      ],
    },
    {
      role: 'tool',
      content: [
        {
          type: 'tool-result',
          toolCallId,
          toolName: lookup.name,
          output: { type: 'json', value: { orderId: `o_${n}`, status: 'shipped', items: 2, total: 4200 } },
        },
      ],
    },
  ];
}

/** A conversation of about `kib` KiB: the user's message, then steps. */
function history(kib: number): ModelMessage[] {
  const messages: ModelMessage[] = [{ role: 'user', content: 'Where are my orders?' }];
  for (let n = 0; JSON.stringify(messages).length < kib * 1024; n++) messages.push(...step(n));
  return messages;
}

const sdkTools: ToolSet = {
  [lookup.name]: sdkTool({ description: lookup.description, inputSchema: jsonSchema(lookup.jsonSchema) }),
};

function modelCase(way: 'oncely' | 'generate-text', kib: number): BenchCase {
  return {
    id: `model.${way}.h${kib}`,
    label:
      way === 'oncely'
        ? `model call's own overhead, from ${kib} KiB of history, one step added a call (\`callModel\`)`
        : `the same through the AI SDK's \`generateText\`, which validates it all every call`,
    unit: 'call',
    // oncely's call takes microseconds: ten times the operations, for a steady median.
    ops: way === 'oncely' ? OPS * 10 : OPS,
    concurrency: 1,
    async open() {
      let messages = history(kib);
      // As a run's driver: the messages it built itself are not checked again (model-prompt.ts).
      const built = new WeakSet<ModelMessage>();
      const prompt = new ModelPrompt({ wellFormed: (m) => built.has(m) });
      const call = async (): Promise<void> => {
        if (way === 'oncely') {
          await callModel({ model: instantModel, messages, tools: [lookup], prompt });
        } else {
          await generateText({ model: instantModel, messages, tools: sdkTools, stopWhen: stepCountIs(1) });
        }
      };
      await call(); // as in a run, the conversation so far was converted by the step before
      return {
        async op(i) {
          const added = step(100_000 + i);
          if (way === 'oncely') added.forEach((m) => built.add(m));
          messages = [...messages, ...added];
          await call();
        },
        close: () => Promise.resolve(),
      };
    },
  };
}

export const MODEL_HISTORY_KIB = [0, 16, 48] as const;

/** The model call at 0, 16 and 48 KiB of history, oncely's and the SDK's. */
export function modelCases(): BenchCase[] {
  return MODEL_HISTORY_KIB.flatMap((kib) => [modelCase('oncely', kib), modelCase('generate-text', kib)]);
}
