import { z } from 'zod/v4';

/** A scripted step as written in configuration or a script file (the `ScriptStep` shape). */
export const scriptStepSchema = z.strictObject({
  text: z.string().optional(),
  toolCalls: z
    .array(
      z.strictObject({
        toolName: z.string().min(1),
        input: z.unknown().optional(),
        rawInput: z.string().optional(),
        id: z.string().min(1).optional(),
      }),
    )
    .optional(),
  usage: z
    .strictObject({
      inputTokens: z.number().int().min(0),
      outputTokens: z.number().int().min(0),
      reasoningTokens: z.number().int().min(0).optional(),
      cachedInputTokens: z.number().int().min(0).optional(),
    })
    .optional(),
});

export const scriptStepsSchema = z.array(scriptStepSchema);

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name');
const url = z.url();

/** What every model of a provider over the network takes besides its name and key. */
const callSettings = {
  /** How long one model call may take, its retries included; an agent's model_timeout_ms wins. */
  timeout_ms: z.number().int().min(1).max(3_600_000).optional(),
  temperature: z.number().min(0).max(2).optional(),
  max_output_tokens: z.number().int().min(1).optional(),
  /** Sent with every request; `${VAR}` in a value is taken from the environment. */
  headers: z.record(z.string(), z.string()).optional(),
  /** Passed as the AI SDK's providerOptions on every call, e.g. `{ openai: { reasoningEffort: low } }`. */
  provider_options: z.record(z.string(), z.record(z.string(), z.json())).optional(),
};

/** How a model is configured, by provider (snake_case, as written in `oncely.yaml`). */
export const modelConfigSchema = z.discriminatedUnion('provider', [
  z.strictObject({
    provider: z.literal('openai'),
    model: z.string().min(1),
    /** OpenAI's Responses API (the default) or Chat Completions (what most compatible servers speak). */
    api: z.enum(['responses', 'chat']).optional(),
    api_key_env: envName.optional(),
    base_url: url.optional(),
    ...callSettings,
  }),
  z.strictObject({
    provider: z.literal('anthropic'),
    model: z.string().min(1),
    api_key_env: envName.optional(),
    base_url: url.optional(),
    ...callSettings,
  }),
  z.strictObject({
    provider: z.literal('openai-compatible'),
    /** The provider's name in logs and provider options, e.g. `ollama`. */
    name: z.string().min(1),
    base_url: url,
    model: z.string().min(1),
    api_key_env: envName.optional(),
    ...callSettings,
  }),
  z
    .strictObject({
      provider: z.literal('scripted'),
      steps: scriptStepsSchema.optional(),
      /** A JSON file holding the steps, relative to the configuration file. */
      script: z.string().min(1).optional(),
      /** Milliseconds each response takes, as a network model's would; default 0. */
      latency_ms: z.number().int().min(0).max(600_000).optional(),
      /** Milliseconds between the pieces of a streamed response; default 0. */
      chunk_delay_ms: z.number().int().min(0).max(60_000).optional(),
    })
    .refine((c) => (c.steps === undefined) !== (c.script === undefined), {
      message: 'give either steps (a list of steps) or script (a JSON file of steps), not both or neither',
    }),
]);

export type ModelConfig = z.infer<typeof modelConfigSchema>;
export type ModelProvider = ModelConfig['provider'];
