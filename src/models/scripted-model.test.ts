import type { LanguageModelV3CallOptions, LanguageModelV3Prompt } from '@ai-sdk/provider';
import { describe, expect, it } from 'vitest';
import { isOncelyError } from '../errors/index.js';
import { scriptedModel, type ScriptStep } from './scripted-model.js';

const user = (text: string): LanguageModelV3Prompt[number] => ({
  role: 'user',
  content: [{ type: 'text', text }],
});
const assistant = (text: string): LanguageModelV3Prompt[number] => ({
  role: 'assistant',
  content: [{ type: 'text', text }],
});
const call = (prompt: LanguageModelV3Prompt): LanguageModelV3CallOptions => ({ prompt });

const steps: ScriptStep[] = [
  {
    text: 'Let me look.',
    toolCalls: [
      { toolName: 'lookup_order', input: { orderId: 'o_1' } },
      { toolName: 'issue_credit', input: { amountCents: 2500 } },
    ],
  },
  { toolCalls: [{ toolName: 'issue_credit', input: { amountCents: 100 } }] },
  { text: 'Done.' },
];

describe('scriptedModel', () => {
  it('answers by turn: the number of assistant messages already in the prompt', async () => {
    const model = scriptedModel(steps);
    const first = await model.doGenerate(call([user('hi')]));
    expect(first.finishReason.unified).toBe('tool-calls');
    expect(first.content).toEqual([
      { type: 'text', text: 'Let me look.' },
      { type: 'tool-call', toolCallId: 'model_call_1', toolName: 'lookup_order', input: '{"orderId":"o_1"}' },
      {
        type: 'tool-call',
        toolCallId: 'model_call_2',
        toolName: 'issue_credit',
        input: '{"amountCents":2500}',
      },
    ]);
    const third = await model.doGenerate(call([user('hi'), assistant('a'), user('more'), assistant('b')]));
    expect(third.finishReason.unified).toBe('stop');
    expect(third.content).toEqual([{ type: 'text', text: 'Done.' }]);
  });

  it('gives the same response to a replay of the same step (a restart after a crash)', async () => {
    const model = scriptedModel(steps);
    const prompt = [user('hi'), assistant('a')];
    const once = await model.doGenerate(call(prompt));
    const again = await model.doGenerate(call(prompt));
    expect(again.content).toEqual(once.content);
    expect(once.content).toEqual([
      {
        type: 'tool-call',
        toolCallId: 'model_call_1',
        toolName: 'issue_credit',
        input: '{"amountCents":100}',
      },
    ]);
  });

  it('repeats tool call ids across turns unless an id is given', async () => {
    const model = scriptedModel([
      { toolCalls: [{ toolName: 'a', input: {} }] },
      {
        toolCalls: [
          { toolName: 'b', input: {} },
          { toolName: 'c', input: {}, id: 'given' },
        ],
      },
    ]);
    const first = await model.doGenerate(call([user('x')]));
    const second = await model.doGenerate(call([user('x'), assistant('y')]));
    const ids = [...first.content, ...second.content].map((p) =>
      p.type === 'tool-call' ? p.toolCallId : p.type,
    );
    expect(ids).toEqual(['model_call_1', 'model_call_1', 'given']);
  });

  it('sends rawInput verbatim, to play broken JSON', async () => {
    const model = scriptedModel([{ toolCalls: [{ toolName: 'a', rawInput: '{not json' }] }]);
    const result = await model.doGenerate(call([user('x')]));
    expect(result.content).toEqual([
      { type: 'tool-call', toolCallId: 'model_call_1', toolName: 'a', input: '{not json' },
    ]);
  });

  it('throws MODEL_OUTPUT_INVALID past the end of the script', async () => {
    const model = scriptedModel([{ text: 'only' }]);
    const error = await Promise.resolve(
      model.doGenerate(call([user('x'), assistant('only'), user('again')])),
    ).catch((e: unknown) => e);
    expect(isOncelyError(error, 'MODEL_OUTPUT_INVALID')).toBe(true);
    expect((error as Error).message).toContain('ran out of script');
    expect((error as Error).message).toContain('has 1 step(s)');
  });

  it('asks a function script with the prompt and the turn', async () => {
    const seen: [number, number][] = [];
    const model = scriptedModel(async (prompt, turn) => {
      seen.push([prompt.length, turn]);
      await Promise.resolve();
      return { text: `turn ${turn}` };
    });
    const result = await model.doGenerate(call([user('x'), assistant('y'), user('z')]));
    expect(result.content).toEqual([{ type: 'text', text: 'turn 1' }]);
    expect(seen).toEqual([[3, 1]]);
  });

  it('records every prompt it receives, in order', async () => {
    const model = scriptedModel(steps);
    const p1 = [user('one')];
    const p2 = [user('one'), assistant('a'), user('two')];
    await model.doGenerate(call(p1));
    await model.doGenerate(call(p2));
    expect(model.received).toEqual([p1, p2]);
  });

  it('streams the same content: the text a word at a time, each call input in pieces, then the call', async () => {
    const model = scriptedModel(steps);
    const { stream } = await model.doStream(call([user('hi')]));
    const parts: { type: string; delta?: string; input?: string }[] = [];
    for await (const part of stream) parts.push(part);
    expect(parts.map((p) => p.type)).toEqual([
      'stream-start',
      'text-start',
      'text-delta',
      'text-delta',
      'text-delta',
      'text-end',
      'tool-input-start',
      'tool-input-delta',
      'tool-input-delta',
      'tool-input-end',
      'tool-call',
      'tool-input-start',
      'tool-input-delta',
      'tool-input-delta',
      'tool-input-end',
      'tool-call',
      'finish',
    ]);
    expect(parts.filter((p) => p.type === 'text-delta').map((p) => p.delta)).toEqual([
      'Let ',
      'me ',
      'look.',
    ]);
    const firstInput = parts.slice(6, 10).filter((p) => p.type === 'tool-input-delta');
    expect(firstInput.map((p) => p.delta).join('')).toBe(parts[10]!.input);
    expect(parts.at(-1)).toMatchObject({ finishReason: { unified: 'tool-calls' } });
  });

  it('reports the usage a step gives, and none otherwise', async () => {
    const model = scriptedModel([
      { text: 'a', usage: { inputTokens: 10, outputTokens: 4, reasoningTokens: 1, cachedInputTokens: 3 } },
      { text: 'b' },
    ]);
    const first = await model.doGenerate(call([user('hi')]));
    expect(first.usage).toEqual({
      inputTokens: { total: 10, noCache: 7, cacheRead: 3, cacheWrite: undefined },
      outputTokens: { total: 4, text: 3, reasoning: 1 },
    });
    const second = await model.doGenerate(call([user('hi'), assistant('a'), user('more')]));
    expect(second.usage.inputTokens.total).toBeUndefined();
  });

  it('waits chunkDelayMs between the pieces of a stream', async () => {
    const model = scriptedModel([{ text: 'one two three' }], { chunkDelayMs: 30 });
    const { stream } = await model.doStream(call([user('hi')]));
    const started = Date.now();
    const seen: unknown[] = [];
    for await (const part of stream) seen.push(part);
    const parts = seen.length;
    // Six pieces after the first: at least 5 gaps of 30 ms.
    expect(parts).toBe(7);
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
  });

  it('is a v3 language model of provider oncely', () => {
    const model = scriptedModel([]);
    expect([model.specificationVersion, model.provider, model.modelId]).toEqual(['v3', 'oncely', 'scripted']);
    // It reads no file: a file part by URL is handed to it as the URL, never downloaded.
    expect(model.supportedUrls).toEqual({ '*/*': [/^https?:\/\//] });
  });
});
