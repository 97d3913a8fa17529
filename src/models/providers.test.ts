import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isOncelyError } from '../errors/index.js';
import type { ModelConfig } from './model-config.js';
import { createModel } from './providers.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'oncely-providers-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function refusal(config: ModelConfig, env: Record<string, string> = {}): Promise<string> {
  const error = await createModel(config, env, { baseDir: dir }).catch((e: unknown) => e);
  expect(isOncelyError(error, 'MODEL_CONFIG_INVALID')).toBe(true);
  return (error as Error).message;
}

describe('createModel', () => {
  it('builds an openai-compatible model for a local server, without a key', async () => {
    const model = await createModel(
      {
        provider: 'openai-compatible',
        name: 'ollama',
        base_url: 'http://localhost:11434/v1',
        model: 'llama3.1',
      },
      {},
    );
    expect(model.specificationVersion).toBe('v3');
    expect(model.modelId).toBe('llama3.1');
    expect(model.provider).toContain('ollama');
  });

  it('builds openai and anthropic models from the key in the environment', async () => {
    const openai = await createModel(
      { provider: 'openai', model: 'gpt-4o-mini' },
      { OPENAI_API_KEY: 'sk-test' },
    );
    expect([openai.provider, openai.modelId]).toEqual(['openai.responses', 'gpt-4o-mini']);
    const anthropic = await createModel(
      { provider: 'anthropic', model: 'claude-sonnet-4-5', api_key_env: 'MY_KEY' },
      { MY_KEY: 'k' },
    );
    expect(anthropic.modelId).toBe('claude-sonnet-4-5');
    expect(anthropic.provider).toContain('anthropic');
  });

  it('names the variable to set when a key is missing', async () => {
    expect(await refusal({ provider: 'openai', model: 'gpt-4o-mini' })).toContain(
      'set the environment variable OPENAI_API_KEY',
    );
    expect(await refusal({ provider: 'anthropic', model: 'claude' }, { ANTHROPIC_API_KEY: '  ' })).toContain(
      'set the environment variable ANTHROPIC_API_KEY',
    );
    expect(
      await refusal({
        provider: 'openai-compatible',
        name: 'vllm',
        base_url: 'http://gpu:8000/v1',
        model: 'qwen',
        api_key_env: 'VLLM_KEY',
      }),
    ).toContain('set the environment variable VLLM_KEY');
  });

  it('plays inline steps, or steps from a JSON script file beside the config', async () => {
    const inline = await createModel({ provider: 'scripted', steps: [{ text: 'hi' }] });
    expect(inline.provider).toBe('oncely');
    await writeFile(
      join(dir, 'script.json'),
      JSON.stringify([{ toolCalls: [{ toolName: 't', input: {} }] }]),
    );
    const fromFile = await createModel({ provider: 'scripted', script: 'script.json' }, {}, { baseDir: dir });
    const result = await fromFile.doGenerate({
      prompt: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }],
    });
    expect(result.finishReason.unified).toBe('tool-calls');
  });

  it('refuses a bad script file, naming it', async () => {
    await writeFile(join(dir, 'bad.json'), '[{"txt": 1}]');
    const message = await refusal({ provider: 'scripted', script: 'bad.json' });
    expect(message).toContain(join(dir, 'bad.json'));
    expect(message).toContain('[0]');
    expect(await refusal({ provider: 'scripted', script: 'missing.json' })).toContain(
      'cannot read the script file',
    );
  });

  it('refuses a configuration that is not valid', async () => {
    const message = await refusal({
      provider: 'openai-compatible',
      name: 'x',
      model: 'm',
    } as unknown as ModelConfig);
    expect(message).toContain('base_url');
  });
});
