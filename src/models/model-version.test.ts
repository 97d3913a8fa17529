import { describe, expect, it } from 'vitest';
import { installedAiMajor } from './ai-runtime.js';
import { modelProblem } from './model-version.js';
import { scriptedModel } from './scripted-model.js';

const model = (specificationVersion: string) => ({
  specificationVersion,
  provider: 'p',
  modelId: 'm',
  doGenerate: () => undefined,
});

describe('modelProblem', () => {
  it('reads the major version of the AI SDK installed beside oncely', async () => {
    const { createRequire } = await import('node:module');
    const { version } = createRequire(import.meta.url)('ai/package.json') as { version: string };
    expect(installedAiMajor()).toBe(Number.parseInt(version, 10));
  });

  it('takes a v3 model under AI SDK 6, and v3 or v4 under AI SDK 7', () => {
    expect(modelProblem(scriptedModel([]), 6)).toBeUndefined();
    expect(modelProblem(model('v3'), 6)).toBeUndefined();
    expect(modelProblem(model('v3'), 7)).toBeUndefined();
    expect(modelProblem(model('v4'), 7)).toBeUndefined();
  });

  it('refuses a v4 model under AI SDK 6, saying to install ai@7 and that it needs Node 22', () => {
    expect(modelProblem(model('v4'), 6)).toMatch(
      /specification v4 \(AI SDK 7\), and the AI SDK installed is 6: install ai@7 \(it needs Node\.js 22 or later\)/,
    );
  });

  it('refuses models of older generations and model ids, naming the providers to install', () => {
    expect(modelProblem(model('v2'), 6)).toMatch(/specification v2 \(AI SDK 5\).*@ai-sdk\/openai@3/);
    expect(modelProblem(model('v2'), 7)).toMatch(/AI SDK 6 and 7 .*@ai-sdk\/openai@4/);
    expect(modelProblem(model('v9'), 7)).toMatch(/specification v9 \(an unknown AI SDK\)/);
    expect(modelProblem('openai/gpt-4.1', 7)).toMatch(/is a model id.*@ai-sdk\/openai@4 \(AI SDK 7\)/);
    expect(modelProblem('openai/gpt-4.1', 6)).toMatch(/@ai-sdk\/openai@3 \(AI SDK 6\)/);
    expect(modelProblem({}, 6)).toMatch(/must be an AI SDK language model/);
  });
});
