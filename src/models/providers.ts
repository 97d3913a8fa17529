import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import type { OncelyLanguageModel } from './ai-runtime.js';
import type { z } from 'zod/v4';
import { OncelyError } from '../errors/index.js';
import { modelConfigSchema, scriptStepsSchema, type ModelConfig } from './model-config.js';
import { expandEnv } from '../util/env-vars.js';
import { aiRuntime, installedAiMajor } from './ai-runtime.js';
import { loadOptional } from '../util/optional-package.js';
import { scriptedModel } from './scripted-model.js';

type Env = Readonly<Record<string, string | undefined>>;

export interface CreateModelOptions {
  /** Where a scripted model's `script` file is looked up: the configuration file's folder; default cwd. */
  readonly baseDir?: string;
}

/**
 * Builds a language model from its configuration. Nothing is sent anywhere: a missing key is found
 * here, from the environment, and a missing provider package (an optional peer dependency) is named
 * with the command that installs it (`PACKAGE_MISSING`).
 *
 * @example
 * const model = await createModel({ provider: 'openai-compatible', name: 'ollama',
 *   base_url: 'http://localhost:11434/v1', model: 'llama3.1' });
 */
export async function createModel(
  config: ModelConfig,
  env: Env = process.env,
  options: CreateModelOptions = {},
): Promise<OncelyLanguageModel> {
  const parsed = modelConfigSchema.safeParse(config);
  if (!parsed.success) throw invalid(`model configuration is not valid: ${issuesText(parsed.error)}`);
  const c = parsed.data;
  switch (c.provider) {
    case 'openai': {
      const apiKey = requiredKey(env, c.api_key_env ?? 'OPENAI_API_KEY', `the openai model "${c.model}"`);
      const { createOpenAI } = await loadProvider('openai', c.model, () => import('@ai-sdk/openai'));
      const provider = createOpenAI({ apiKey, ...baseUrl(c), ...headersOf(c, env) });
      // Chat Completions for servers that speak only it; the Responses API otherwise (the provider's default).
      return withSettings(c.api === 'chat' ? provider.chat(c.model) : provider.responses(c.model), c);
    }
    case 'anthropic': {
      const apiKey = requiredKey(
        env,
        c.api_key_env ?? 'ANTHROPIC_API_KEY',
        `the anthropic model "${c.model}"`,
      );
      const { createAnthropic } = await loadProvider('anthropic', c.model, () => import('@ai-sdk/anthropic'));
      return withSettings(createAnthropic({ apiKey, ...baseUrl(c), ...headersOf(c, env) })(c.model), c);
    }
    case 'openai-compatible': {
      const apiKey =
        c.api_key_env === undefined
          ? undefined
          : requiredKey(env, c.api_key_env, `the ${c.name} model "${c.model}"`);
      const { createOpenAICompatible } = await loadProvider(
        'openai-compatible',
        c.model,
        () => import('@ai-sdk/openai-compatible'),
      );
      const provider = createOpenAICompatible({
        name: c.name,
        baseURL: c.base_url,
        ...(apiKey === undefined ? {} : { apiKey }),
        ...headersOf(c, env),
      });
      return withSettings(provider(c.model), c);
    }
    case 'scripted': {
      const steps = c.steps ?? (await readScript(resolve(options.baseDir ?? process.cwd(), c.script ?? '')));
      return scriptedModel(steps, {
        ...(c.latency_ms === undefined ? {} : { latencyMs: c.latency_ms }),
        ...(c.chunk_delay_ms === undefined ? {} : { chunkDelayMs: c.chunk_delay_ms }),
      });
    }
  }
}

type NetworkModel = Exclude<ModelConfig, { provider: 'scripted' }>;

function baseUrl(c: { base_url?: string | undefined }): { baseURL?: string } {
  return c.base_url === undefined ? {} : { baseURL: c.base_url };
}

/** The configured headers, `${VAR}` taken from the environment; an unset variable is named. */
function headersOf(c: NetworkModel, env: Env): { headers?: Record<string, string> } {
  if (c.headers === undefined) return {};
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(c.headers)) {
    const expanded = expandEnv(value, env);
    if ('missing' in expanded) {
      throw invalid(
        `the header ${name} of the model "${c.model}" uses \${${expanded.missing}}, which is not set in the environment`,
        { env: expanded.missing },
      );
    }
    headers[name] = expanded.value;
  }
  return { headers };
}

/**
 * The model with the configured call settings as its defaults (temperature, max output tokens,
 * provider options); a call that sets one itself wins.
 */
async function withSettings(model: OncelyLanguageModel, c: NetworkModel): Promise<OncelyLanguageModel> {
  const settings = {
    ...(c.temperature === undefined ? {} : { temperature: c.temperature }),
    ...(c.max_output_tokens === undefined ? {} : { maxOutputTokens: c.max_output_tokens }),
    ...(c.provider_options === undefined ? {} : { providerOptions: c.provider_options }),
  };
  if (Object.keys(settings).length === 0) return model;
  const { ai } = await aiRuntime();
  return ai.wrapLanguageModel({ model, middleware: ai.defaultSettingsMiddleware({ settings }) });
}

function requiredKey(env: Env, name: string, what: string): string {
  const value = env[name];
  if (value !== undefined && value.trim() !== '') return value;
  throw invalid(
    `${what} needs an API key: set the environment variable ${name}` +
      ' (or name another variable with api_key_env)',
    { env: name },
  );
}

/**
 * The major of each provider package made for each AI SDK generation (the one built on the same
 * @ai-sdk/provider major as `ai`: 3 for AI SDK 6, 4 for AI SDK 7), which the error names.
 */
const PROVIDER_MAJORS: Record<NetworkModel['provider'], Record<number, number>> = {
  openai: { 6: 3, 7: 4 },
  anthropic: { 6: 3, 7: 4 },
  'openai-compatible': { 6: 2, 7: 3 },
};

/**
 * A provider package, an optional peer dependency loaded when a model of it is made; when it is
 * missing, the error names the version for the installed AI SDK (`npm install @ai-sdk/openai@3`).
 */
function loadProvider<T>(
  provider: NetworkModel['provider'],
  model: string,
  load: () => Promise<T>,
): Promise<T> {
  const name = `@ai-sdk/${provider}`;
  const major = PROVIDER_MAJORS[provider][installedAiMajor() ?? 0];
  return loadOptional(
    {
      name,
      neededBy: `the ${provider} model "${model}"`,
      ...(major === undefined ? {} : { install: `${name}@${major}` }),
    },
    load,
  );
}

async function readScript(file: string) {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (cause) {
    throw invalid(`cannot read the script file ${file}: ${String(cause)}`, { file }, cause);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw invalid(`the script file ${file} is not JSON: ${String(cause)}`, { file }, cause);
  }
  const parsed = scriptStepsSchema.safeParse(json);
  if (!parsed.success) {
    throw invalid(`the script file ${file} is not a list of steps: ${issuesText(parsed.error)}`, { file });
  }
  return parsed.data;
}

function issuesText(error: z.ZodError): string {
  return error.issues.map((i) => `${pathText(i.path) || '(top)'}: ${i.message}`).join('; ');
}

function pathText(path: readonly PropertyKey[]): string {
  return path.map((p, n) => (typeof p === 'number' ? `[${p}]` : `${n > 0 ? '.' : ''}${String(p)}`)).join('');
}

function invalid(message: string, details?: Record<string, unknown>, cause?: unknown): OncelyError {
  return new OncelyError('MODEL_CONFIG_INVALID', message, {
    ...(details === undefined ? {} : { details }),
    ...(cause === undefined ? {} : { cause }),
  });
}
