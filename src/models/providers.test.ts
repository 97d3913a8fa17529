import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isOncelyError } from '../errors/index.js';
import type { ModelConfig } from './model-config.js';
import { callModel } from './call-model.js';
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

/** A Chat Completions server on loopback that answers "ok" and keeps each request it got. */
async function chatServer(): Promise<{
  url: string;
  requests: { path: string; headers: IncomingHttpHeaders; body: Record<string, unknown> }[];
  close(): Promise<void>;
}> {
  const requests: { path: string; headers: IncomingHttpHeaders; body: Record<string, unknown> }[] = [];
  const server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
    req.on('end', () => {
      requests.push({
        path: req.url ?? '',
        headers: req.headers,
        body: JSON.parse(text) as Record<string, unknown>,
      });
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          id: 'chatcmpl-1',
          object: 'chat.completion',
          created: 1,
          model: 'm',
          choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
          usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe('createModel: call settings', () => {
  it('speaks Chat Completions with api: chat, the Responses API by default', async () => {
    const chat = await createModel(
      { provider: 'openai', model: 'gpt-4.1', api: 'chat' },
      { OPENAI_API_KEY: 'k' },
    );
    const responses = await createModel({ provider: 'openai', model: 'gpt-4.1' }, { OPENAI_API_KEY: 'k' });
    expect([chat.provider, responses.provider]).toEqual(['openai.chat', 'openai.responses']);
  });

  it.each(['openai', 'openai-compatible'] as const)(
    'sends temperature, max output tokens, provider options and headers (%s, to a server on loopback)',
    async (provider) => {
      const server = await chatServer();
      try {
        const settings = {
          temperature: 0.2,
          max_output_tokens: 64,
          headers: { 'x-team': 'billing', authorization: 'Bearer ${TEAM_TOKEN}' },
        };
        const model =
          provider === 'openai'
            ? await createModel(
                {
                  provider,
                  model: 'gpt-4.1',
                  api: 'chat',
                  base_url: server.url,
                  ...settings,
                  provider_options: { openai: { user: 'acct_7' } },
                },
                { OPENAI_API_KEY: 'k', TEAM_TOKEN: 's3cret' },
              )
            : await createModel(
                {
                  provider,
                  name: 'local',
                  model: 'llama',
                  base_url: server.url,
                  ...settings,
                  provider_options: { local: { user: 'acct_7' } },
                },
                { TEAM_TOKEN: 's3cret' },
              );
        const turn = await callModel({ model, messages: [{ role: 'user', content: 'hi' }], tools: [] });
        expect(turn.text).toBe('ok');
        const [request] = server.requests;
        expect(request?.path).toBe('/v1/chat/completions');
        expect(request?.body).toMatchObject({ temperature: 0.2, max_tokens: 64, user: 'acct_7' });
        expect(request?.headers['x-team']).toBe('billing');
        expect(request?.headers.authorization).toBe('Bearer s3cret');
      } finally {
        await server.close();
      }
    },
  );

  it('names the variable a header uses when it is not set', async () => {
    expect(
      await refusal(
        { provider: 'openai', model: 'gpt-4.1', headers: { authorization: 'Bearer ${NOT_SET}' } },
        { OPENAI_API_KEY: 'k' },
      ),
    ).toMatch(/the header authorization of the model "gpt-4.1" uses \$\{NOT_SET\}, which is not set/);
  });
});
