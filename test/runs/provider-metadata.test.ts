import type { LanguageModelV3CallOptions, LanguageModelV3GenerateResult } from '@ai-sdk/provider';
import { MockLanguageModelV3 } from 'ai/test';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, defineTool, openRuntime, read, type Runtime } from '../../src/index.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * A provider that chains reasoning (OpenAI's Responses API, Anthropic's thinking) needs its reasoning
 * items and their metadata sent back on the next call; the run's checkpoint keeps them, and each
 * model step's event says which model answered and what it cost.
 */
const lookup = defineTool({
  name: 'lookup_order',
  description: 'Look up an order',
  input: z.object({ orderId: z.string() }),
  effect: read(),
  execute: () => ({ status: 'shipped' }),
});

const USAGE = {
  inputTokens: { total: 100, noCache: 60, cacheRead: 40, cacheWrite: undefined },
  outputTokens: { total: 30, text: 10, reasoning: 20 },
};

describe.each(STORE_KINDS)('a run keeps what the provider attached, on %s', (kind) => {
  let opened: OpenedStore;
  let runtime: Runtime;
  const prompts: LanguageModelV3CallOptions['prompt'][] = [];
  beforeEach(async () => {
    opened = await openTestStore(kind, 'provider-metadata');
    prompts.length = 0;
    const answers: LanguageModelV3GenerateResult[] = [
      {
        content: [
          {
            type: 'reasoning',
            text: '',
            providerMetadata: { openai: { itemId: 'rs_1', reasoningEncryptedContent: 'enc' } },
          },
          {
            type: 'tool-call',
            toolCallId: 'fc_1',
            toolName: 'lookup_order',
            input: '{"orderId":"o_1"}',
            providerMetadata: { openai: { itemId: 'fc_item_1' } },
          },
        ],
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
        usage: USAGE,
        response: { modelId: 'gpt-5-2026-01-01' },
        warnings: [],
      },
      {
        content: [{ type: 'text', text: 'It shipped.', providerMetadata: { openai: { itemId: 'msg_2' } } }],
        finishReason: { unified: 'stop', raw: 'stop' },
        usage: USAGE,
        warnings: [],
      },
    ];
    const model = new MockLanguageModelV3({
      modelId: 'gpt-5',
      doGenerate: ({ prompt }) => {
        prompts.push(structuredClone(prompt));
        return Promise.resolve(answers[prompts.length - 1]!);
      },
    });
    runtime = await openRuntime({
      store: opened.store,
      agents: [defineAgent({ name: 'support', instructions: 'Help.', model, tools: [lookup] })],
    });
  });
  afterEach(async () => {
    await runtime.close();
    await opened.cleanup();
  });

  it('sends reasoning and tool calls back with their provider metadata, and records usage and model per step', async () => {
    const run = await runtime.run({
      tenantId: 'acme',
      agent: 'support',
      input: 'Where is o_1?',
      runId: 'pm-1',
    });
    expect(run.status).toBe('completed');
    const assistant = prompts[1]?.find((m) => m.role === 'assistant');
    expect(assistant?.content).toEqual([
      {
        type: 'reasoning',
        text: '',
        providerOptions: { openai: { itemId: 'rs_1', reasoningEncryptedContent: 'enc' } },
      },
      {
        type: 'tool-call',
        toolCallId: expect.stringMatching(/^call_[0-9a-f]{16}$/) as unknown as string,
        toolName: 'lookup_order',
        input: { orderId: 'o_1' },
        providerOptions: { openai: { itemId: 'fc_item_1' } },
      },
    ]);
    const events = await opened.store.runs.events('acme', 'pm-1', 0, 100);
    const responses = events
      .filter((e) => e.type === 'model.response')
      .map((e) => e.data as Record<string, unknown>);
    expect(responses.map((r) => r.model)).toEqual([
      { provider: 'mock-provider', id: 'gpt-5-2026-01-01' },
      { provider: 'mock-provider', id: 'gpt-5' },
    ]);
    expect(responses[0]?.usage).toEqual({
      inputTokens: 100,
      outputTokens: 30,
      totalTokens: 130,
      reasoningTokens: 20,
      cachedInputTokens: 40,
    });
    const final = (await runtime.getRun('acme', 'pm-1')).checkpoint.messages.at(-1);
    expect(final).toEqual({
      role: 'assistant',
      content: [{ type: 'text', text: 'It shipped.', providerOptions: { openai: { itemId: 'msg_2' } } }],
    });
  });
});
