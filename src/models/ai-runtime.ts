import {
  InvalidPromptError,
  type LanguageModelV3,
  type LanguageModelV3CallOptions,
  type LanguageModelV3Prompt,
} from '@ai-sdk/provider';
import type * as Ai from 'ai';
import type { LanguageModel, ModelMessage, ToolSet } from 'ai';
import type * as AiInternal from 'ai/internal';
import { createRequire } from 'node:module';

/**
 * A language model object oncely can drive: one made by a provider package of the AI SDK installed
 * beside it (AI SDK 6: specification v3; AI SDK 7: v3 or v4). Typed from the application's own `ai`,
 * so a model of the SDK it installed is accepted where it compiles.
 */
export type OncelyLanguageModel = Exclude<LanguageModel, string | { readonly specificationVersion: 'v2' }>;

/** The tools and tool choice as a provider takes them. */
export interface DescribedTools {
  readonly tools: LanguageModelV3CallOptions['tools'];
  readonly toolChoice: LanguageModelV3CallOptions['toolChoice'];
}

/**
 * The AI SDK's functions oncely calls a model with, over the generation installed (6 or 7): the
 * few places where their internals differ are answered here, and nowhere else.
 */
export interface AiRuntime {
  readonly ai: typeof Ai;
  readonly internal: typeof AiInternal;
  /** The AI SDK's major version: 6 or 7. */
  readonly major: number;
  /** The tools described to the provider (name, description, JSON Schema, strict), and the choice `auto`. */
  describeTools(tools: ToolSet): Promise<DescribedTools>;
  /**
   * The model as the installed SDK drives it: itself under AI SDK 6; under AI SDK 7 a model of
   * specification v3 is adapted to v4 by the SDK (prompts, content and stream parts converted).
   * Typed as v3: oncely reads only what both specifications share (text, reasoning, tool calls, usage).
   */
  driven(model: OncelyLanguageModel): LanguageModelV3;
  /**
   * The messages as the provider takes them, converted by the SDK's own function (as `generateText`
   * converts them), for a model `driven()` gave.
   */
  convertMessages(
    model: LanguageModelV3,
    messages: ModelMessage[],
    signal?: AbortSignal,
  ): Promise<LanguageModelV3Prompt>;
  /** Throws the SDK's `InvalidPromptError` when a message is not a `ModelMessage`, as AI SDK 6's `generateText` does. */
  checkMessages(messages: readonly ModelMessage[]): Promise<void>;
}

/** The AI SDK 6 internal that AI SDK 7 split in two (`prepareTools`, `prepareToolChoice`). */
interface Ai6Internal {
  prepareToolsAndToolChoice(options: {
    tools: ToolSet;
    toolChoice: undefined;
    activeTools: undefined;
  }): DescribedTools;
}

/**
 * The SDK's conversion of messages to a provider's prompt, as both generations have it (AI SDK 6
 * names the system prompt `system`, AI SDK 7 `instructions`; oncely sends it apart, so neither).
 */
type ConvertPrompt = (options: {
  prompt: { system: undefined; instructions: undefined; messages: ModelMessage[] };
  supportedUrls: Record<string, RegExp[]>;
  download: undefined;
  abortSignal?: AbortSignal;
}) => Promise<LanguageModelV3Prompt>;

/** The AI SDK 7 internals that AI SDK 6 does not have (or has under another name). */
interface Ai7Internal {
  prepareTools(options: { tools: ToolSet }): Promise<DescribedTools['tools']>;
  prepareToolChoice(options: { toolChoice: undefined }): DescribedTools['toolChoice'];
  resolveLanguageModel(model: OncelyLanguageModel): LanguageModelV3;
}

let loading: Promise<AiRuntime> | undefined;

/**
 * The AI SDK, loaded with the first model call rather than with the package: it is the larger part
 * of what importing oncely would cost, and a process that only guards calls never needs it.
 */
export function aiRuntime(): Promise<AiRuntime> {
  loading ??= Promise.all([import('ai'), import('ai/internal')]).then(([ai, internal]) =>
    runtimeOf(ai, internal, installedAiMajor() ?? 6),
  );
  return loading;
}

let installed: { major: number | undefined } | undefined;

/**
 * The major version of the `ai` package oncely resolves, read from its package.json without loading
 * it; undefined when it is not installed.
 */
export function installedAiMajor(): number | undefined {
  if (installed === undefined) {
    try {
      const { version } = createRequire(import.meta.url)('ai/package.json') as { version: string };
      installed = { major: Number.parseInt(version, 10) };
    } catch {
      installed = { major: undefined };
    }
  }
  return installed.major;
}

function runtimeOf(ai: typeof Ai, internal: typeof AiInternal, major: number): AiRuntime {
  const seven = internal as unknown as Partial<Ai7Internal>;
  const sixDescribe = (internal as unknown as Partial<Ai6Internal>).prepareToolsAndToolChoice;
  const convert = internal.convertToLanguageModelPrompt as unknown as ConvertPrompt;
  const driven = new WeakMap<object, LanguageModelV3>();
  return {
    ai,
    internal,
    major,
    describeTools: async (tools) => {
      if (sixDescribe !== undefined) {
        return sixDescribe({ tools, toolChoice: undefined, activeTools: undefined });
      }
      const described = await seven.prepareTools!({ tools });
      return {
        tools: described,
        toolChoice: described === undefined ? undefined : seven.prepareToolChoice!({ toolChoice: undefined }),
      };
    },
    driven: (model) => {
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- a v4 model under AI SDK 7's types
      if (seven.resolveLanguageModel === undefined) return model as LanguageModelV3;
      let resolved = driven.get(model);
      if (resolved === undefined) {
        resolved = seven.resolveLanguageModel(model);
        driven.set(model, resolved);
      }
      return resolved;
    },
    convertMessages: async (model, messages, signal) =>
      convert({
        prompt: { system: undefined, instructions: undefined, messages },
        supportedUrls: await model.supportedUrls,
        download: undefined,
        ...(signal === undefined ? {} : { abortSignal: signal }),
      }),
    checkMessages: async (messages) => {
      if (messages.length === 0) {
        throw new InvalidPromptError({ prompt: messages, message: 'messages must not be empty' });
      }
      for (const message of messages) {
        const checked = await ai.modelMessageSchema.safeParseAsync(message);
        if (!checked.success) {
          throw new InvalidPromptError({
            prompt: messages,
            message: 'The messages do not match the ModelMessage[] schema.',
            cause: checked.error,
          });
        }
      }
    },
  };
}
