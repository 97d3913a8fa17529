import { generateText, stepCountIs, streamText } from 'ai';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  Ledger,
  defineAgent,
  defineTool,
  external,
  isOncelyError,
  openRuntime,
  type Tool,
} from '../../src/index.js';
import { durableLoop } from '../../src/frameworks/ai-sdk/index.js';
import { installedAiMajor } from '../../src/models/ai-runtime.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * Models of AI SDK 7 (specification v4), driven by the durable loop and by oncely's own run loop.
 * They need ai@7 installed beside oncely (Node.js 22 or later): CI's Node 24 leg installs it; on
 * a machine with ai@6 this file says loudly that it was skipped (and fails with ONCELY_REQUIRE_AI_SDK=7). The other tests of oncely/ai-sdk
 * and of the runtime run under both generations (their v3 models adapted to v4 by AI SDK 7).
 */
const SDK = installedAiMajor();
if (SDK !== 7 && process.env.ONCELY_REQUIRE_AI_SDK === '7') {
  throw new Error(`ONCELY_REQUIRE_AI_SDK=7 is set, but the ai installed is ${String(SDK)}: install ai@7`);
}
if (SDK !== 7) {
  console.warn(
    `\n*** AI SDK 7 tests SKIPPED: the ai installed is ${String(SDK)}; install ai@7 (Node.js >= 22) to run them ***\n`,
  );
}

/** The part of AI SDK 7's MockLanguageModelV4 these tests use (typed here: oncely compiles against AI SDK 6). */
interface MockV4 {
  readonly specificationVersion: 'v4';
  readonly doGenerateCalls: { prompt: { role: string; content: unknown }[] }[];
}
type V4Content = Record<string, unknown> & { type: string };
type MockV4Class = new (options: {
  modelId?: string;
  doGenerate?: () => Promise<unknown>;
  doStream?: () => Promise<unknown>;
}) => MockV4;

async function mockV4(): Promise<{ Mock: MockV4Class; stream: (parts: unknown[]) => ReadableStream }> {
  const sdkTest = (await import('ai/test')) as unknown as {
    MockLanguageModelV4: MockV4Class;
    convertArrayToReadableStream: (parts: unknown[]) => ReadableStream;
  };
  return { Mock: sdkTest.MockLanguageModelV4, stream: sdkTest.convertArrayToReadableStream };
}

const USAGE = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 2, text: 2, reasoning: undefined },
};

function response(content: V4Content[]) {
  const calls = content.some((p) => p.type === 'tool-call');
  return {
    content,
    finishReason: { unified: calls ? 'tool-calls' : 'stop', raw: calls ? 'tool_calls' : 'stop' },
    usage: USAGE,
    warnings: [],
  };
}

const credit = (providerId: string, amountCents: number): V4Content => ({
  type: 'tool-call',
  toolCallId: providerId,
  toolName: 'issue_credit',
  input: JSON.stringify({ accountId: 'acct_7', amountCents }),
});

/** A v4 model answering from a script, one response per call. */
async function scripted(script: ReturnType<typeof response>[], modelId = 'gpt-7') {
  const { Mock } = await mockV4();
  let asked = 0;
  const model = new Mock({
    modelId,
    doGenerate: () => {
      const next = script[asked];
      asked += 1;
      if (next === undefined) throw new Error(`the script has no response ${asked}`);
      return Promise.resolve(next);
    },
  });
  return { model, asked: () => asked };
}

/** A billing service's books: every credit it applied, with the key it came with. */
function creditTool(
  credits: { key: string; amountCents: number }[],
  behave: () => Promise<void> | void = () => undefined,
): Tool {
  return defineTool({
    name: 'issue_credit',
    description: "Credit a customer's account",
    input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
    effect: external(),
    timeoutMs: 200,
    execute: async ({ amountCents }, ctx) => {
      await behave();
      credits.push({ key: ctx.idempotencyKey, amountCents });
      return { receipt: `cr_${credits.length}` };
    },
  });
}

describe.skipIf(SDK !== 7).each(STORE_KINDS)('AI SDK 7 models (specification v4) on %s', (kind) => {
  let opened: OpenedStore;
  let ledger: Ledger;
  beforeEach(async () => {
    opened = await openTestStore(kind, 'ai-sdk-7');
    ledger = new Ledger(opened.store, { actorId: 'test', landingMarginMs: 0 });
  });
  afterEach(async () => {
    await ledger.close();
    await opened.cleanup();
  });

  it('the durable loop records a v4 response before its tool runs and replays it after a restart: one credit', async () => {
    const credits: { key: string; amountCents: number }[] = [];
    const tools = [creditTool(credits)];
    const first = await scripted([
      response([{ type: 'text', text: 'Crediting.' }, credit('call_1', 2500)]),
      response([{ type: 'text', text: 'Done.' }]),
    ]);
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'v4-1' });
    const wrapped = loop.model(first.model as never);
    expect(wrapped.specificationVersion).toBe('v4');
    const result = await loop.run(() =>
      generateText({
        model: wrapped,
        tools: loop.tools(tools),
        stopWhen: stepCountIs(5),
        prompt: 'Refund 42',
      }),
    );
    expect(result.text).toBe('Done.');
    const id = result.steps[0]!.toolCalls[0]!.toolCallId;
    expect(id).toMatch(/^call_[0-9a-f]{16}$/);
    expect(credits).toEqual([{ key: `v4-1:${id}`, amountCents: 2500 }]);

    const again = await scripted([response([credit('call_9', 9900)])]);
    const restarted = durableLoop({ ledger, tenantId: 'acme', runId: 'v4-1' });
    const replay = await restarted.run(() =>
      generateText({
        model: restarted.model(again.model as never),
        tools: restarted.tools(tools),
        stopWhen: stepCountIs(5),
        prompt: 'Refund 42',
      }),
    );
    expect(again.asked()).toBe(0);
    expect(replay.text).toBe('Done.');
    expect(replay.steps[0]?.toolCalls[0]?.toolCallId).toBe(id);
    expect(credits).toHaveLength(1);
  });

  it('the durable loop streams a v4 model, holds the tool call until recorded, and stops on an unknown call', async () => {
    const { Mock, stream } = await mockV4();
    const credits: { key: string; amountCents: number }[] = [];
    // The billing API applies the credit, then answers after the tool's 200 ms timeout.
    const slow = creditTool(credits, () => new Promise((resolve) => setTimeout(resolve, 400)));
    let asked = 0;
    const model = new Mock({
      doStream: () => {
        asked += 1;
        return Promise.resolve({
          stream: stream([
            { type: 'stream-start', warnings: [] },
            { type: 'text-start', id: 't' },
            { type: 'text-delta', id: 't', delta: 'Crediting.' },
            { type: 'text-end', id: 't' },
            credit('p1', 2500),
            { type: 'finish', finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage: USAGE },
          ]),
        });
      },
    });
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'v4-2' });
    const stopped = await loop
      .run(async () => {
        const result = streamText({
          model: loop.model(model as never),
          tools: loop.tools([slow]),
          stopWhen: stepCountIs(5),
          prompt: 'Refund',
        });
        for await (const part of result.fullStream) if (part.type === 'error') throw part.error;
        return result.text;
      })
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(isOncelyError(stopped, 'RUN_CALL_UNKNOWN')).toBe(true);
    expect(asked).toBe(1);
    const key = (stopped as { details: { idempotencyKey: string } }).details.idempotencyKey;
    expect(key).toMatch(/^v4-2:call_[0-9a-f]{16}$/);
    expect((await ledger.store.ledger.get('acme', key))?.status).toBe('indeterminate');
    // The credit landed after the timeout: the books show it under the key the ledger holds unknown.
    await vi.waitFor(() => expect(credits).toEqual([{ key, amountCents: 2500 }]));
    const [step] = await loop.steps();
    expect(step?.response).toMatchObject({
      content: [{ type: 'text', text: 'Crediting.' }, { type: 'tool-call' }],
    });
  });

  it("oncely's own run loop drives a v4 model: the call runs once and the model hears its result", async () => {
    const credits: { key: string; amountCents: number }[] = [];
    const { model } = await scripted([
      response([credit('call_1', 2500)]),
      response([{ type: 'text', text: 'Credited $25.' }]),
    ]);
    const runtime = await openRuntime({
      store: opened.store,
      agents: [
        defineAgent({
          name: 'billing',
          instructions: 'Refund.',
          model: model as never,
          tools: [creditTool(credits)],
        }),
      ],
    });
    try {
      const run = await runtime.run({
        tenantId: 'acme',
        agent: 'billing',
        input: 'Refund 42',
        runId: 'v4-run',
      });
      expect(run.status).toBe('completed');
      expect(credits).toHaveLength(1);
      expect(credits[0]?.key).toMatch(/^v4-run:/);
      // The second call's prompt carries the recorded result under the runtime's id.
      const tool = model.doGenerateCalls[1]?.prompt.find((m) => m.role === 'tool');
      expect(tool?.content).toMatchObject([
        {
          type: 'tool-result',
          toolName: 'issue_credit',
          output: { type: 'json', value: { status: 'completed', result: { receipt: 'cr_1' } } },
        },
      ]);
      const events = await opened.store.runs.events('acme', 'v4-run', 0, 100);
      const models = events
        .filter((e) => e.type === 'model.response')
        .map((e) => (e.data as { model: unknown }).model);
      expect(models).toEqual([
        { provider: 'mock-provider', id: 'gpt-7' },
        { provider: 'mock-provider', id: 'gpt-7' },
      ]);
    } finally {
      await runtime.close();
    }
  });
});
