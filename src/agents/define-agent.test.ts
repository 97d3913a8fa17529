import { MockLanguageModelV3 } from 'ai/test';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isOncelyError } from '../errors/index.js';
import { scriptedModel } from '../models/index.js';
import { installedAiMajor } from '../models/ai-runtime.js';
import { defineTool, read } from '../tools/index.js';
import { defineAgent } from './define-agent.js';

const lookup = defineTool({
  name: 'lookup_order',
  description: 'Look up an order',
  input: z.object({ orderId: z.string() }),
  effect: read(),
  execute: () => ({ status: 'shipped' }),
});

function refusal(model: unknown): string {
  try {
    defineAgent({ name: 'billing', instructions: 'Help.', model: model as never, tools: [lookup] });
    return 'accepted';
  } catch (error) {
    expect(isOncelyError(error, 'AGENT_DEFINITION_INVALID')).toBe(true);
    return (error as Error).message;
  }
}

describe('defineAgent: the model', () => {
  it('takes an AI SDK 6 model (specification v3) and a scripted one', () => {
    expect(refusal(new MockLanguageModelV3())).toBe('accepted');
    expect(refusal(scriptedModel([{ text: 'hi' }]))).toBe('accepted');
  });

  it('refuses a model of specification v2 (AI SDK 5) and says what to install', () => {
    const model = { specificationVersion: 'v2', provider: 'p', modelId: 'm', doGenerate: () => undefined };
    const message = refusal(model);
    expect(message).toContain('specification v2 (AI SDK 5)');
    expect(message).toContain('install a provider of that generation');
  });

  it('takes a model of specification v4 (AI SDK 7) under AI SDK 7, and under AI SDK 6 says to install ai@7', () => {
    const model = { specificationVersion: 'v4', provider: 'p', modelId: 'm', doGenerate: () => undefined };
    if (installedAiMajor() === 7) expect(refusal(model)).toBe('accepted');
    else expect(refusal(model)).toContain('install ai@7 (it needs Node.js 22 or later)');
  });

  it('refuses a model id given as a string, saying to use a provider', () => {
    expect(refusal('openai/gpt-4.1')).toMatch(/"openai\/gpt-4.1" is a model id; give a model object/);
  });
});
