/* eslint-disable @typescript-eslint/no-unsafe-member-access -- HTTP answers are JSON of no static type, read by assertions */
import { Agent, Runner, Usage, type Model, type ModelRequest, type ModelResponse } from '@openai/agents-core';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, external, isOncelyError, type Tool } from '../../src/index.js';
import { durableLoop } from '../../src/frameworks/ai-sdk/index.js';
import { durableAgentRun } from '../../src/frameworks/openai-agents/index.js';
import { DIALECTS, TENANT, ApiHarness } from './support/harness.js';

/*
 * A run of an application's own loop has no row in `runs`, but its recorded model responses and its
 * calls are served as a run page (`GET /v1/loop-runs/{id}`): a real AI SDK loop and a real OpenAI
 * Agents run, each stopped by a call nobody knows the outcome of.
 */

/** A partner that never answers in time: every call's outcome is unknown. */
const payPartner: Tool = defineTool({
  name: 'pay_partner',
  description: 'Pay a partner',
  input: z.object({ partner: z.string(), cents: z.number().int().positive() }),
  effect: external(),
  timeoutMs: 50,
  execute: async (_args, ctx) => {
    await new Promise((resolve) => setTimeout(resolve, 500));
    ctx.signal.throwIfAborted();
    return { paid: true };
  },
});

const USAGE = {
  inputTokens: { total: 12, noCache: 12, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 3, text: 3, reasoning: undefined },
};

describe.each(DIALECTS)("a loop's run page over HTTP on %s", (dialect) => {
  let h: ApiHarness;
  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  it('serves an AI SDK loop: its recorded responses as a conversation, each call with its key and status', async () => {
    const runId = h.nextId('ai-loop');
    const model = new MockLanguageModelV3({
      modelId: 'mock-4',
      doGenerate: () =>
        Promise.resolve({
          content: [
            { type: 'reasoning', text: 'The partner is owed 9 dollars.' },
            { type: 'text', text: 'Paying the partner.' },
            {
              type: 'tool-call',
              toolCallId: 'provider_1',
              toolName: 'pay_partner',
              input: '{"partner":"p_1","cents":900}',
            },
          ],
          finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
          usage: USAGE,
          warnings: [],
        }),
    });
    const loop = durableLoop({ ledger: h.runtime.ledger, tenantId: TENANT, runId });
    const stopped = await loop
      .run(() =>
        generateText({
          model: loop.model(model),
          tools: loop.tools([payPartner]),
          stopWhen: stepCountIs(3),
          prompt: 'Pay p_1',
        }),
      )
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(isOncelyError(stopped, 'RUN_CALL_UNKNOWN')).toBe(true);

    // oncely does not drive it: the runs route does not know it, the loop-runs route does.
    expect((await h.request('GET', `/v1/runs/${runId}`, { key: h.keys.viewer })).status).toBe(404);
    const page = await h.request('GET', `/v1/loop-runs/${runId}`, { key: h.keys.viewer });
    expect(page.status, page.text).toBe(200);
    const key = page.body.calls[0].idempotency_key as string;
    expect(key).toMatch(new RegExp(`^${runId}:call_[0-9a-f]{16}$`));
    expect(page.body).toMatchObject({
      tenant_id: TENANT,
      run_id: runId,
      framework: 'ai-sdk',
      unknown_calls: 1,
      calls: [
        {
          idempotency_key: key,
          tool_name: 'pay_partner',
          status: 'indeterminate',
          args: { partner: 'p_1', cents: 900 },
        },
      ],
      steps: [
        {
          step: 0,
          framework: 'ai-sdk',
          model_id: 'mock-4',
          usage: { input_tokens: 12, output_tokens: 3, total_tokens: 15 },
          parts: [
            { type: 'reasoning', text: 'The partner is owed 9 dollars.' },
            { type: 'text', text: 'Paying the partner.' },
            {
              type: 'tool-call',
              tool_call_id: key.split(':')[1],
              tool_name: 'pay_partner',
              input: { partner: 'p_1', cents: 900 },
              provider_executed: false,
              idempotency_key: key,
            },
          ],
        },
      ],
    });

    // Another tenant: not found, as for any record of acme's.
    const other = await h.request('GET', `/v1/loop-runs/${runId}`, { key: h.keys.otherViewer });
    expect([other.status, other.body.error.code]).toEqual([404, 'RUN_NOT_FOUND']);
    const nothing = await h.request('GET', '/v1/loop-runs/never-recorded', { key: h.keys.viewer });
    expect([nothing.status, nothing.body.error.code]).toEqual([404, 'RUN_NOT_FOUND']);
  });

  it('serves an OpenAI Agents JS run the same way', async () => {
    const runId = h.nextId('agents-loop');
    const model: Model = {
      getResponse: (_request: ModelRequest): Promise<ModelResponse> =>
        Promise.resolve({
          output: [
            {
              type: 'message',
              role: 'assistant',
              status: 'completed',
              content: [{ type: 'output_text', text: 'Paying p_1.' }],
            },
            {
              type: 'function_call',
              callId: 'fc_1',
              name: 'pay_partner',
              arguments: '{"partner":"p_1","cents":900}',
              status: 'completed',
            },
          ],
          usage: new Usage({ requests: 1, inputTokens: 20, outputTokens: 4, totalTokens: 24 }),
        }),
      getStreamedResponse: () => {
        throw new Error('not streamed here');
      },
    };
    const run = durableAgentRun({ ledger: h.runtime.ledger, tenantId: TENANT, runId });
    const agent = new Agent({
      name: 'payer',
      instructions: 'Pay.',
      model: run.model(model),
      tools: run.tools([payPartner]),
    });
    const stopped = await run
      .run(() => new Runner({ tracingDisabled: true }).run(agent, 'Pay p_1'))
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(isOncelyError(stopped, 'RUN_CALL_UNKNOWN')).toBe(true);

    const page = await h.request('GET', `/v1/loop-runs/${runId}`, { key: h.keys.viewer });
    expect(page.status, page.text).toBe(200);
    const key = page.body.calls[0].idempotency_key as string;
    expect(page.body).toMatchObject({
      framework: 'openai-agents',
      unknown_calls: 1,
      steps: [
        {
          step: 0,
          framework: 'openai-agents',
          usage: { input_tokens: 20, output_tokens: 4, total_tokens: 24 },
          parts: [
            { type: 'text', text: 'Paying p_1.' },
            {
              type: 'tool-call',
              tool_name: 'pay_partner',
              input: { partner: 'p_1', cents: 900 },
              idempotency_key: key,
            },
          ],
        },
      ],
    });
  });

  it('serves calls made under a run id with no recorded response (executeToolCall)', async () => {
    const call = await h.seedCall('indeterminate');
    const page = await h.request('GET', `/v1/loop-runs/${call.runId}`, { key: h.keys.viewer });
    expect(page.status, page.text).toBe(200);
    expect(page.body).toMatchObject({
      framework: null,
      steps: [],
      unknown_calls: 1,
      calls: [{ idempotency_key: call.idempotencyKey }],
    });
  });
});
