import type { LanguageModelV3GenerateResult, LanguageModelV3StreamPart } from '@ai-sdk/provider';
import { Agent, Runner, Usage, type Model, type ModelResponse, type StreamEvent } from '@openai/agents-core';
import { SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { generateText, stepCountIs, streamText } from 'ai';
import { MockLanguageModelV3, convertArrayToReadableStream } from 'ai/test';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ledger, defineTool, external, isOncelyError, runTraceId } from '../../src/index.js';
import { durableLoop } from '../../src/frameworks/ai-sdk/index.js';
import { durableAgentRun } from '../../src/frameworks/openai-agents/index.js';
import { openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * Spans of a team's own loop (oncely/ai-sdk, oncely/openai-agents), caught by an in-memory exporter:
 * `run()` is the run's span in the run's own trace, linked to the caller's span; its model calls
 * (GenAI conventions, recorded or replayed) and its tool calls (ledger attributes) hang from it,
 * on the first run and on a restart alike.
 */

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();

beforeAll(() => {
  trace.setGlobalTracerProvider(provider);
  context.setGlobalContextManager(contextManager.enable());
});
afterAll(async () => {
  trace.disable();
  context.disable();
  await provider.shutdown();
});

const credits: string[] = [];
const issueCredit = defineTool({
  name: 'issue_credit',
  description: "Credit a customer's account",
  input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
  effect: external(),
  timeoutMs: 100,
  execute: async (_args, ctx) => {
    credits.push(ctx.idempotencyKey);
    if (ctx.runId.startsWith('lost')) {
      // The request left and no answer came: the call is unknown.
      await new Promise((_, reject) =>
        ctx.signal.addEventListener('abort', () => reject(new Error('connection reset')), { once: true }),
      );
    }
    return { receipt: `cr_${credits.length}` };
  },
});

const USAGE = {
  inputTokens: { total: 120, noCache: 100, cacheRead: 20, cacheWrite: undefined },
  outputTokens: { total: 30, text: 30, reasoning: undefined },
};
const CREDIT_INPUT = '{"accountId":"acct_7","amountCents":2500}';

/** Answers by the conversation: a credit first, then words. Counts the times it was asked. */
function aiModel(): { model: MockLanguageModelV3; asked: () => number } {
  let asked = 0;
  const answer = (afterTool: boolean): LanguageModelV3GenerateResult => ({
    content: afterTool
      ? [{ type: 'text', text: 'Refunded $25.' }]
      : [{ type: 'tool-call', toolCallId: 'p1', toolName: 'issue_credit', input: CREDIT_INPUT }],
    finishReason: afterTool ? { unified: 'stop', raw: 'stop' } : { unified: 'tool-calls', raw: 'tool_calls' },
    usage: USAGE,
    response: { modelId: 'gpt-5-2026-01-01' },
    warnings: [],
  });
  const model = new MockLanguageModelV3({
    modelId: 'gpt-5',
    doGenerate: ({ prompt }) => {
      asked += 1;
      return Promise.resolve(answer(prompt.some((m) => m.role === 'tool')));
    },
    doStream: ({ prompt }) => {
      asked += 1;
      const afterTool = prompt.some((m) => m.role === 'tool');
      const parts: LanguageModelV3StreamPart[] = afterTool
        ? [
            { type: 'text-start', id: 't' },
            { type: 'text-delta', id: 't', delta: 'Refunded ' },
            { type: 'text-delta', id: 't', delta: '$25.' },
            { type: 'text-end', id: 't' },
          ]
        : [{ type: 'tool-call', toolCallId: 'p1', toolName: 'issue_credit', input: CREDIT_INPUT }];
      return Promise.resolve({
        stream: convertArrayToReadableStream<LanguageModelV3StreamPart>([
          { type: 'stream-start', warnings: [] },
          { type: 'response-metadata', modelId: 'gpt-5-2026-01-01' },
          ...parts,
          { type: 'finish', usage: USAGE, finishReason: answer(afterTool).finishReason },
        ]),
      });
    },
  });
  return { model, asked: () => asked };
}

const named = (name: string) => (s: ReadableSpan) => s.name === name;
const parentOf = (s: ReadableSpan | undefined) => s?.parentSpanContext?.spanId;
const idOf = (s: ReadableSpan | undefined) => s?.spanContext().spanId;

describe('spans of a team’s own loop', () => {
  let opened: OpenedStore;
  let ledger: Ledger;
  beforeEach(async () => {
    exporter.reset();
    credits.length = 0;
    opened = await openTestStore('sqlite', 'loop-spans');
    ledger = new Ledger(opened.store, { actorId: 'test', landingMarginMs: 0 });
  });
  afterEach(async () => {
    await ledger.close();
    await opened.cleanup();
  });

  /** One run of the AI SDK loop under a request's span; `stream` drives it with streamText. */
  async function aiRun(runId: string, model: MockLanguageModelV3, stream = false): Promise<string> {
    const loop = durableLoop({ ledger, tenantId: 'acme', runId });
    return trace.getTracer('app').startActiveSpan('POST /refunds', async (request) => {
      try {
        return await loop.run(async () => {
          const options = {
            model: loop.model(model),
            tools: loop.tools([issueCredit]),
            stopWhen: stepCountIs(4),
            prompt: 'Please refund order 42',
          };
          if (!stream) return (await generateText(options)).text;
          const result = streamText({ ...options, onError: () => undefined });
          let text = '';
          for await (const chunk of result.textStream) text += chunk;
          return text;
        });
      } finally {
        request.end();
      }
    });
  }

  function checkTrace(runId: string, drives: number): { drives: ReadableSpan[]; chats: ReadableSpan[] } {
    const spans = exporter.getFinishedSpans();
    const traceId = runTraceId('acme', runId);
    const runs = spans.filter(named('oncely.run.drive'));
    const requests = spans.filter(named('POST /refunds'));
    expect(runs).toHaveLength(drives);
    runs.forEach((run, i) => {
      expect(run.spanContext().traceId).toBe(traceId);
      expect(run.status.code).not.toBe(SpanStatusCode.ERROR);
      // Linked to the request that ran it; not its child (the request's trace is not the run's).
      expect(run.links.map((l) => l.context.spanId)).toEqual([idOf(requests[i])]);
      expect(requests[i]?.spanContext().traceId).not.toBe(traceId);
    });
    // Every run of the loop under this id hangs from the run's one parent, whichever process ran it.
    expect(new Set(runs.map(parentOf)).size).toBe(1);
    return { drives: runs, chats: spans.filter((s) => s.name.startsWith('chat')) };
  }

  for (const stream of [false, true]) {
    it(`AI SDK (${stream ? 'streamText' : 'generateText'}): run, model-call and tool-call spans, in one trace across a restart`, async () => {
      const { model, asked } = aiModel();
      expect(await aiRun(`refund-${String(stream)}`, model, stream)).toBe('Refunded $25.');
      expect(await aiRun(`refund-${String(stream)}`, model, stream)).toBe('Refunded $25.'); // a restart
      expect([asked(), credits.length]).toEqual([2, 1]);

      const { drives, chats } = checkTrace(`refund-${String(stream)}`, 2);
      for (const d of drives) {
        expect(d.attributes).toMatchObject({
          'oncely.run.id': `refund-${String(stream)}`,
          'oncely.tenant.id': 'acme',
          'oncely.loop': 'ai-sdk',
          'oncely.drive.end': 'ended',
        });
      }
      expect(chats.map((c) => c.name)).toEqual(['chat gpt-5', 'chat gpt-5', 'chat gpt-5', 'chat gpt-5']);
      expect(chats.map((c) => c.kind)).toEqual(Array(4).fill(SpanKind.CLIENT));
      expect(chats[0]?.attributes).toMatchObject({
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': 'mock-provider',
        'gen_ai.request.model': 'gpt-5',
        'gen_ai.response.model': 'gpt-5-2026-01-01',
        'gen_ai.usage.input_tokens': 120,
        'gen_ai.usage.output_tokens': 30,
        'gen_ai.response.finish_reasons': ['tool-calls'],
        'oncely.run.step': 1,
        'oncely.model.tool_calls': 1,
        'oncely.model.replayed': false,
      });
      expect(
        chats.map((c) => [c.attributes['oncely.run.step'], c.attributes['oncely.model.replayed']]),
      ).toEqual([
        [1, false],
        [2, false],
        [1, true], // the restart: both responses replayed, the model not asked
        [2, true],
      ]);
      expect(chats[3]?.attributes['gen_ai.response.finish_reasons']).toEqual(['stop']);
      chats.forEach((c, i) => expect(parentOf(c)).toBe(idOf(drives[i < 2 ? 0 : 1])));

      const tools = exporter.getFinishedSpans().filter(named('execute_tool issue_credit'));
      expect(
        tools.map((t) => [t.attributes['oncely.executed'], t.attributes['oncely.ledger.status']]),
      ).toEqual([
        [true, 'completed'],
        [false, 'completed'], // replayed from the ledger
      ]);
      expect(tools[0]?.attributes['oncely.idempotency_key']).toBe(credits[0]);
      tools.forEach((t, i) => expect(parentOf(t)).toBe(idOf(drives[i])));
    });
  }

  it('AI SDK: a stop is the run waiting, not an error: the run span says why, the model is not asked again', async () => {
    const { model, asked } = aiModel();
    const stopped = await aiRun('lost-1', model).catch((error: unknown) => error);
    expect(isOncelyError(stopped, 'RUN_CALL_UNKNOWN')).toBe(true);
    expect(asked()).toBe(1);
    const { drives, chats } = checkTrace('lost-1', 1);
    expect(drives[0]?.attributes).toMatchObject({
      'oncely.drive.end': 'stopped',
      'oncely.reason': 'RUN_CALL_UNKNOWN',
    });
    expect(chats).toHaveLength(1); // the refused second call asked nothing and is no span
    const tool = exporter.getFinishedSpans().find(named('execute_tool issue_credit'));
    expect(tool?.attributes['oncely.ledger.status']).toBe('indeterminate');
    expect(parentOf(tool)).toBe(idOf(drives[0]));
  });

  it('AI SDK: without a context manager, model and tool spans still hang from the run span', async () => {
    context.disable();
    try {
      const { model } = aiModel();
      const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'no-cm' });
      await loop.run(() =>
        generateText({
          model: loop.model(model),
          tools: loop.tools([issueCredit]),
          stopWhen: stepCountIs(4),
          prompt: 'Please refund order 42',
        }),
      );
    } finally {
      context.setGlobalContextManager(contextManager.enable());
    }
    const spans = exporter.getFinishedSpans();
    const drive = spans.find(named('oncely.run.drive'));
    const children = spans.filter((s) => s !== drive);
    expect(children.map((s) => s.name).sort()).toEqual([
      'chat gpt-5',
      'chat gpt-5',
      'execute_tool issue_credit',
    ]);
    for (const s of children) expect(parentOf(s)).toBe(idOf(drive));
  });

  it('OpenAI Agents JS (run and run streamed): run, model-call and tool-call spans, in one trace across a restart', async () => {
    const output = (afterTool: boolean): ModelResponse['output'] =>
      afterTool
        ? [
            {
              type: 'message',
              role: 'assistant',
              status: 'completed',
              content: [{ type: 'output_text', text: 'Refunded $25.' }],
            },
          ]
        : [
            {
              type: 'function_call',
              callId: 'p1',
              name: 'issue_credit',
              arguments: CREDIT_INPUT,
              status: 'completed',
            },
          ];
    const afterTool = (input: unknown) =>
      Array.isArray(input) && input.some((i: { type?: string }) => i.type === 'function_call_result');
    let asked = 0;
    // As the SDK's OpenAI models do, it keeps its name as `_model`.
    const model: Model & { _model: string } = {
      _model: 'gpt-4.1',
      getResponse: (request) => {
        asked += 1;
        return Promise.resolve({
          output: output(afterTool(request.input)),
          usage: new Usage({ requests: 1, inputTokens: 12, outputTokens: 4, totalTokens: 16 }),
        });
      },
      async *getStreamedResponse(request) {
        asked += 1;
        await Promise.resolve();
        yield { type: 'response_started' };
        yield {
          type: 'response_done',
          response: {
            id: `resp_${asked}`,
            usage: { requests: 1, inputTokens: 12, outputTokens: 4, totalTokens: 16 },
            output: output(afterTool(request.input)),
          },
        } as StreamEvent;
      },
    };
    const runner = new Runner({ tracingDisabled: true });
    const drive = (runId: string, stream: boolean) => {
      const run = durableAgentRun({ ledger, tenantId: 'acme', runId });
      const agent = new Agent({ name: 'billing', model: run.model(model), tools: run.tools([issueCredit]) });
      return trace.getTracer('app').startActiveSpan('POST /refunds', async (request) => {
        try {
          return await run.run(async () => {
            if (!stream) return (await runner.run(agent, 'Please refund order 42')).finalOutput;
            const streamed = await runner.run(agent, 'Please refund order 42', { stream: true });
            await streamed.completed;
            return streamed.finalOutput;
          });
        } finally {
          request.end();
        }
      });
    };
    for (const stream of [false, true]) {
      exporter.reset();
      const runId = `agents-${String(stream)}`;
      expect(await drive(runId, stream)).toBe('Refunded $25.');
      expect(await drive(runId, stream)).toBe('Refunded $25.');
      const { drives, chats } = checkTrace(runId, 2);
      expect(drives.map((d) => d.attributes['oncely.loop'])).toEqual(['openai-agents', 'openai-agents']);
      expect(chats.map((c) => c.name)).toEqual(Array(4).fill('chat gpt-4.1'));
      expect(chats[0]?.attributes).toMatchObject({
        'gen_ai.operation.name': 'chat',
        'gen_ai.request.model': 'gpt-4.1',
        'gen_ai.usage.input_tokens': 12,
        'gen_ai.usage.output_tokens': 4,
        'oncely.model.tool_calls': 1,
      });
      expect(
        chats.map((c) => [c.attributes['oncely.run.step'], c.attributes['oncely.model.replayed']]),
      ).toEqual([
        [1, false],
        [2, false],
        [1, true],
        [2, true],
      ]);
      chats.forEach((c, i) => expect(parentOf(c)).toBe(idOf(drives[i < 2 ? 0 : 1])));
      const tools = exporter.getFinishedSpans().filter(named('execute_tool issue_credit'));
      expect(tools.map((t) => t.attributes['oncely.executed'])).toEqual([true, false]);
      tools.forEach((t, i) => expect(parentOf(t)).toBe(idOf(drives[i])));
    }
    expect([asked, credits.length]).toEqual([4, 2]);
  });
});
