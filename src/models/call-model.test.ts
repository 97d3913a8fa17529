import { APICallError } from '@ai-sdk/provider';
import type { LanguageModelV3GenerateResult } from '@ai-sdk/provider';
import type { ModelMessage } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isOncelyError } from '../errors/index.js';
import { defineTool, external, read } from '../tools/index.js';
import { callModel } from './call-model.js';
import { scriptedModel } from './scripted-model.js';

let executions = 0;
const issueCredit = defineTool({
  name: 'issue_credit',
  description: "Credit a customer's account",
  input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
  effect: external(),
  execute: () => {
    executions += 1;
    return { ok: true };
  },
});
const lookupOrder = defineTool({
  name: 'lookup_order',
  description: 'Look up an order',
  input: z.object({ orderId: z.string() }),
  effect: read(),
  execute: () => {
    executions += 1;
    return { status: 'shipped' };
  },
});
const tools = [issueCredit, lookupOrder];
const messages: ModelMessage[] = [{ role: 'user', content: 'I was charged twice.' }];

describe('callModel', () => {
  it('returns the tool calls the model asked for, and runs none of them', async () => {
    const model = scriptedModel([
      {
        text: 'Checking.',
        toolCalls: [
          { toolName: 'lookup_order', input: { orderId: 'o_1' } },
          { toolName: 'issue_credit', input: { accountId: 'acct_1', amountCents: 2500 } },
        ],
      },
    ]);
    const turn = await callModel({ model, system: 'Help with billing.', messages, tools });
    expect(turn).toEqual({
      text: 'Checking.',
      parts: [{ type: 'text', text: 'Checking.' }],
      modelId: 'scripted',
      finishReason: 'tool-calls',
      toolCalls: [
        { modelToolCallId: 'model_call_1', toolName: 'lookup_order', input: { orderId: 'o_1' } },
        {
          modelToolCallId: 'model_call_2',
          toolName: 'issue_credit',
          input: { accountId: 'acct_1', amountCents: 2500 },
        },
      ],
    });
    expect(executions).toBe(0);
  });

  it('describes the tools to the model with their JSON Schema and sends the system prompt', async () => {
    const mock = new MockLanguageModelV3({ doGenerate: result([{ type: 'text', text: 'ok' }]) });
    const turn = await callModel({ model: mock, system: 'Help with billing.', messages, tools });
    expect(turn.usage).toEqual({ inputTokens: 10, outputTokens: 2, totalTokens: 12 });
    const options = mock.doGenerateCalls[0];
    expect(options?.prompt[0]).toEqual({ role: 'system', content: 'Help with billing.' });
    expect(options?.tools?.map((t) => t.name)).toEqual(['issue_credit', 'lookup_order']);
    expect(options?.tools?.[1]).toMatchObject({
      type: 'function',
      description: 'Look up an order',
      inputSchema: { type: 'object', properties: { orderId: { type: 'string' } }, required: ['orderId'] },
    });
  });

  it('returns a text-only answer with finish reason stop', async () => {
    const model = scriptedModel([{ text: 'Your refund is on its way.' }]);
    const turn = await callModel({ model, messages, tools });
    expect(turn).toEqual({
      text: 'Your refund is on its way.',
      parts: [{ type: 'text', text: 'Your refund is on its way.' }],
      modelId: 'scripted',
      toolCalls: [],
      finishReason: 'stop',
    });
    expect(model.received).toHaveLength(1);
  });

  it('keeps reasoning, text and tool calls in order with what the provider attached, and the usage', async () => {
    const mock = new MockLanguageModelV3({
      doGenerate: {
        content: [
          {
            type: 'reasoning',
            text: '',
            providerMetadata: { openai: { itemId: 'rs_1', reasoningEncryptedContent: 'enc' } },
          },
          { type: 'text', text: 'Checking.', providerMetadata: { openai: { itemId: 'msg_1' } } },
          {
            type: 'tool-call',
            toolCallId: 'fc_1',
            toolName: 'lookup_order',
            input: '{"orderId":"o_1"}',
            providerMetadata: { openai: { itemId: 'fc_1' } },
          },
          { type: 'text', text: '' },
        ],
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
        usage: {
          inputTokens: { total: 100, noCache: 60, cacheRead: 40, cacheWrite: undefined },
          outputTokens: { total: 30, text: 10, reasoning: 20 },
        },
        response: { modelId: 'gpt-5-2026-01-01' },
        warnings: [],
      },
    });
    const turn = await callModel({ model: mock, messages, tools });
    expect(turn.parts).toEqual([
      {
        type: 'reasoning',
        text: '',
        providerMetadata: { openai: { itemId: 'rs_1', reasoningEncryptedContent: 'enc' } },
      },
      { type: 'text', text: 'Checking.', providerMetadata: { openai: { itemId: 'msg_1' } } },
    ]);
    expect(turn.toolCalls[0]?.providerMetadata).toEqual({ openai: { itemId: 'fc_1' } });
    expect(turn.modelId).toBe('gpt-5-2026-01-01');
    expect(turn.usage).toEqual({
      inputTokens: 100,
      outputTokens: 30,
      totalTokens: 130,
      reasoningTokens: 20,
      cachedInputTokens: 40,
    });
  });

  it('reports a call to an unknown tool instead of throwing', async () => {
    const model = scriptedModel([{ toolCalls: [{ toolName: 'delete_everything', input: { all: true } }] }]);
    const turn = await callModel({ model, messages, tools });
    expect(turn.toolCalls).toEqual([
      {
        modelToolCallId: 'model_call_1',
        toolName: 'delete_everything',
        input: { all: true },
        problem: 'there is no tool named "delete_everything"; the tools are: issue_credit, lookup_order',
      },
    ]);
  });

  it('reports input that is not JSON, with the raw text, not repaired or dropped', async () => {
    const model = scriptedModel([
      { toolCalls: [{ toolName: 'issue_credit', rawInput: '{"accountId": "a' }] },
    ]);
    const turn = await callModel({ model, messages, tools });
    expect(turn.toolCalls).toEqual([
      {
        modelToolCallId: 'model_call_1',
        toolName: 'issue_credit',
        input: '{"accountId": "a',
        problem: 'the input for tool "issue_credit" is not valid JSON',
      },
    ]);
  });

  it('passes input that breaks the schema through: the runtime validates it', async () => {
    const model = scriptedModel([{ toolCalls: [{ toolName: 'issue_credit', input: { amountCents: -1 } }] }]);
    const turn = await callModel({ model, messages, tools });
    expect(turn.toolCalls).toEqual([
      { modelToolCallId: 'model_call_1', toolName: 'issue_credit', input: { amountCents: -1 } },
    ]);
  });

  it('replays the conversation to the model: it hears the recorded result under the runtime id', async () => {
    const model = scriptedModel([
      { toolCalls: [{ toolName: 'issue_credit', input: { accountId: 'acct_1', amountCents: 2500 } }] },
      { text: 'I credited $25.' },
    ]);
    const history: ModelMessage[] = [
      ...messages,
      {
        role: 'assistant',
        content: [
          {
            type: 'tool-call',
            toolCallId: 'call_1',
            toolName: 'issue_credit',
            input: { accountId: 'acct_1', amountCents: 2500 },
          },
        ],
      },
      {
        role: 'tool',
        content: [
          {
            type: 'tool-result',
            toolCallId: 'call_1',
            toolName: 'issue_credit',
            output: { type: 'json', value: { receipt: 'r_1' } },
          },
        ],
      },
    ];
    const turn = await callModel({ model, messages: history, tools });
    expect(turn.text).toBe('I credited $25.');
    expect(model.received[0]?.at(-1)).toEqual({
      role: 'tool',
      content: [
        {
          type: 'tool-result',
          toolCallId: 'call_1',
          toolName: 'issue_credit',
          output: { type: 'json', value: { receipt: 'r_1' } },
        },
      ],
    });
  });

  it('retries a transient error with backoff, then succeeds', async () => {
    let attempts = 0;
    const mock = new MockLanguageModelV3({
      doGenerate: () => {
        attempts += 1;
        if (attempts <= 2) return Promise.reject(apiError(503, true));
        return Promise.resolve(result([{ type: 'text', text: 'third time' }]));
      },
    });
    const turn = await callModel({ model: mock, messages, tools });
    expect(turn.text).toBe('third time');
    expect(attempts).toBe(3);
  });

  it('gives up after maxRetries with MODEL_CALL_FAILED', async () => {
    let attempts = 0;
    const mock = new MockLanguageModelV3({
      doGenerate: () => {
        attempts += 1;
        return Promise.reject(apiError(503, true));
      },
    });
    const error = await callModel({ model: mock, messages, tools, maxRetries: 1 }).catch((e: unknown) => e);
    expect(isOncelyError(error, 'MODEL_CALL_FAILED')).toBe(true);
    expect((error as Error).message).toContain('failed 2 times');
    expect(attempts).toBe(2);
  });

  it('does not retry a non-retryable error: MODEL_CALL_FAILED with the cause', async () => {
    let attempts = 0;
    const cause = apiError(401, false);
    const mock = new MockLanguageModelV3({
      doGenerate: () => {
        attempts += 1;
        return Promise.reject(cause);
      },
    });
    const error = await callModel({ model: mock, messages, tools }).catch((e: unknown) => e);
    expect(isOncelyError(error, 'MODEL_CALL_FAILED')).toBe(true);
    expect((error as Error).message).toContain('(HTTP 401)');
    expect((error as Error).cause).toBe(cause);
    expect(attempts).toBe(1);
  });

  it("passes the model's own oncely errors through (a script that ran out)", async () => {
    const model = scriptedModel([]);
    const error = await callModel({ model, messages, tools }).catch((e: unknown) => e);
    expect(isOncelyError(error, 'MODEL_OUTPUT_INVALID')).toBe(true);
  });

  it("throws the signal's reason when aborted", async () => {
    const controller = new AbortController();
    const reason = new Error('lease lost');
    controller.abort(reason);
    const model = scriptedModel([{ text: 'never' }]);
    await expect(callModel({ model, messages, tools, signal: controller.signal })).rejects.toBe(reason);
  });
});

function apiError(statusCode: number, isRetryable: boolean): APICallError {
  return new APICallError({
    message: `HTTP ${statusCode}`,
    url: 'https://models.invalid/v1/chat',
    requestBodyValues: {},
    statusCode,
    isRetryable,
    responseHeaders: { 'retry-after-ms': '1' },
  });
}

function result(content: LanguageModelV3GenerateResult['content']): LanguageModelV3GenerateResult {
  return {
    content,
    finishReason: { unified: 'stop', raw: 'stop' },
    usage: {
      inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
      outputTokens: { total: 2, text: 2, reasoning: undefined },
    },
    warnings: [],
  };
}
