import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3GenerateResult,
} from '@ai-sdk/provider';
import { APICallError } from '@ai-sdk/provider';
import type { JSONSchema7, LanguageModelUsage, ModelMessage, ToolSet } from 'ai';
import { aiRuntime, type AiRuntime, type DescribedTools, type OncelyLanguageModel } from './ai-runtime.js';
import { OncelyError, isOncelyError } from '../errors/index.js';
import type { Tool } from '../tools/index.js';
import { ModelPrompt } from './model-prompt.js';
import { realClock, type Clock } from '../util/clock.js';

/** One tool call of a model's response, as the model made it. Its id is the provider's, not trusted. */
export interface ModelToolCall {
  /** The provider's id; providers repeat and omit them, so the runtime mints its own. */
  readonly modelToolCallId: string | undefined;
  readonly toolName: string;
  /** The parsed JSON input, or the raw text when it is not JSON (then `problem` says so). */
  readonly input: unknown;
  /** Set when the call cannot run: an unknown tool, or input that is not JSON. */
  readonly problem?: string;
  /** What the provider attached to the call (item ids, signatures), sent back with it. */
  readonly providerMetadata?: ProviderMetadata;
}

type ProviderMetadata = Record<string, Record<string, unknown>>;

/** A text or reasoning part of a response, in the order the model gave it, with what the provider attached. */
export interface ModelTurnPart {
  readonly type: 'text' | 'reasoning';
  readonly text: string;
  readonly providerMetadata?: ProviderMetadata;
}

export interface ModelUsage {
  readonly inputTokens?: number;
  readonly outputTokens?: number;
  readonly totalTokens?: number;
  /** Output tokens spent reasoning (part of outputTokens). */
  readonly reasoningTokens?: number;
  /** Input tokens read from the provider's cache (part of inputTokens). */
  readonly cachedInputTokens?: number;
}

/** A model's response to one call: text, the tool calls it asks for, and why it stopped. */
export interface ModelTurn {
  /** The text parts, joined. */
  readonly text: string;
  /**
   * Text and reasoning, in order, each with the provider's metadata: kept in the checkpoint and sent
   * back on the next call, as providers that chain reasoning (OpenAI's item ids, Anthropic's
   * signatures) require.
   */
  readonly parts: readonly ModelTurnPart[];
  /** The model that answered, as the provider named it (else the configured model id). */
  readonly modelId: string;
  readonly toolCalls: readonly ModelToolCall[];
  /** `stop`, `tool-calls`, `length`, `content-filter`, `error` or `other`. */
  readonly finishReason: string;
  readonly usage?: ModelUsage;
}

export interface CallModelOptions {
  /** A model of the AI SDK installed (6: specification v3; 7: v3 or v4). */
  readonly model: OncelyLanguageModel;
  readonly system?: string;
  /** The conversation so far, in the AI SDK's JSON form (as stored in the run's checkpoint). */
  readonly messages: ModelMessage[];
  /** The tools the model may ask for; they are described to it, never executed here. */
  readonly tools: readonly Tool[];
  readonly signal?: AbortSignal;
  /** Retries of transient errors (429, 5xx, lost connections), with backoff; default 2. */
  readonly maxRetries?: number;
  /**
   * How long the call may take, its retries included; past it the call is aborted and fails with
   * `MODEL_CALL_FAILED` marked transient (a hung provider). Default: no limit.
   */
  readonly timeoutMs?: number;
  /**
   * The conversation as converted for the model at the last call, kept across a run's steps so each
   * step validates and converts only the messages added since (default: a fresh one, all of them).
   */
  readonly prompt?: ModelPrompt;
  /**
   * Streams the response (the model's `doStream`) and tells each piece as it arrives: a `start` at
   * the beginning of every try (a retry starts over), then text, reasoning and tool-input deltas,
   * then `finish`. The response returned is the whole one, as `doGenerate` would give it. What this
   * throws is ignored.
   */
  readonly onDelta?: (delta: ModelDelta) => void;
  /** The time of `timeoutMs`; default the machine's. */
  readonly clock?: Clock;
}

/** A piece of a streamed response, as it arrives. */
export type ModelDelta =
  | { readonly type: 'start' }
  | { readonly type: 'text' | 'reasoning'; readonly text: string }
  /** A tool call begins: `index` is its place among the response's calls (0, 1, …). */
  | { readonly type: 'tool-call-start'; readonly index: number; readonly toolName: string }
  | { readonly type: 'tool-input'; readonly index: number; readonly text: string }
  | { readonly type: 'finish'; readonly finishReason: string };

/** Whether a failed model call may succeed later (an outage, a rate limit, a timeout). */
export function isTransientModelFailure(error: unknown): boolean {
  return isOncelyError(error, 'MODEL_CALL_FAILED') && error.details?.transient === true;
}

export const DEFAULT_MODEL_RETRIES = 2;

/**
 * Asks the model for its next response, exactly one step. A model call is a read, so the SDK retries
 * transient errors; it never runs a tool. Calls to unknown tools and calls whose input is not JSON
 * are returned with a `problem`, not thrown, so the run can answer the model with an error result.
 * Failures after retries throw `MODEL_CALL_FAILED`; an aborted call throws the signal's reason.
 *
 * @example
 * const turn = await callModel({ model, system: agent.instructions, messages, tools: agent.tools, signal });
 * for (const call of turn.toolCalls) console.log(call.toolName, call.input);
 */
export async function callModel(options: CallModelOptions): Promise<ModelTurn> {
  const timeout =
    options.timeoutMs === undefined
      ? undefined
      : (options.clock ?? realClock).timeoutSignal(options.timeoutMs);
  const signals = [options.signal, timeout].filter((s): s is AbortSignal => s !== undefined);
  const signal = signals.length === 0 ? undefined : AbortSignal.any(signals);
  try {
    const sdk = await aiRuntime();
    const model = sdk.driven(options.model);
    const prompt = await (options.prompt ?? new ModelPrompt()).of(
      model,
      options.system,
      options.messages,
      signal,
    );
    const { tools, toolChoice } = await providerTools(sdk, options.tools);
    const call: LanguageModelV3CallOptions = {
      prompt,
      ...(tools === undefined ? {} : { tools }),
      ...(toolChoice === undefined ? {} : { toolChoice }),
      ...(signal === undefined ? {} : { abortSignal: signal }),
    };
    // The SDK's own retry of transient errors (backoff, retry-after headers), as generateText's.
    const { retry } = sdk.internal.prepareRetries({
      maxRetries: options.maxRetries ?? DEFAULT_MODEL_RETRIES,
      abortSignal: signal,
    });
    const onDelta = options.onDelta;
    // Raced against the signal: a provider (or a middleware) that ignores its abort signal must not
    // hold the step, and so the run's live lease, for ever.
    const result = await untilAborted(
      signal,
      retry(() => (onDelta === undefined ? model.doGenerate(call) : streamed(model, call, onDelta))),
    );
    return turnOf(sdk, result, options.tools, model.modelId);
  } catch (error) {
    if (options.signal?.aborted === true) throw options.signal.reason;
    if (timeout?.aborted === true) {
      const name = `${options.model.provider}/${options.model.modelId}`;
      throw new OncelyError(
        'MODEL_CALL_FAILED',
        `the call to model ${name} gave no answer within ${options.timeoutMs} ms; the provider may be ` +
          'down or overloaded; the run waits and tries the step again',
        { cause: error, details: { model: name, transient: true, timedOut: true } },
      );
    }
    if (isOncelyError(error)) throw error;
    throw callFailed(await aiRuntime(), options.model, error);
  }
}

/** `work`, or the signal's reason as soon as it aborts, whichever comes first. */
async function untilAborted<T>(signal: AbortSignal | undefined, pending: PromiseLike<T>): Promise<T> {
  const work = Promise.resolve(pending);
  if (signal === undefined) return work;
  if (signal.aborted) {
    work.catch(() => undefined); // settles later, unobserved
    throw signal.reason as Error;
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    work.finally(() => signal.removeEventListener('abort', onAbort)).then(resolve, reject);
  });
}

/** Tells a delta; an observer's failure is not the call's. */
function tell(onDelta: (delta: ModelDelta) => void, delta: ModelDelta): void {
  try {
    onDelta(delta);
  } catch {
    // ignored
  }
}

type TextContent = Extract<LanguageModelV3Content, { type: 'text' | 'reasoning' }>;
type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/**
 * The model's streamed response, told piece by piece as it arrives, gathered into the response
 * `doGenerate` would have given: text and reasoning parts in the order they began (each with what
 * its provider attached), tool calls as the stream completes them, the finish reason and usage. An
 * error part throws (the SDK's retry may try again, from a new `start`).
 */
async function streamed(
  model: LanguageModelV3,
  call: LanguageModelV3CallOptions,
  onDelta: (delta: ModelDelta) => void,
): Promise<LanguageModelV3GenerateResult> {
  tell(onDelta, { type: 'start' });
  const { stream } = await model.doStream(call);
  const content: LanguageModelV3Content[] = [];
  const open = new Map<string, Mutable<TextContent>>();
  const inputs = new Map<string, number>();
  let finishReason: LanguageModelV3GenerateResult['finishReason'] | undefined;
  let usage: LanguageModelV3GenerateResult['usage'] | undefined;
  let modelId: string | undefined;
  const reader = stream.getReader();
  try {
    for (;;) {
      const { done, value: part } = await reader.read();
      if (done) break;
      switch (part.type) {
        case 'text-start':
        case 'reasoning-start': {
          const type = part.type === 'text-start' ? 'text' : 'reasoning';
          const text: Mutable<TextContent> = {
            type,
            text: '',
            ...(part.providerMetadata === undefined ? {} : { providerMetadata: part.providerMetadata }),
          };
          open.set(`${type}:${part.id}`, text);
          content.push(text);
          break;
        }
        case 'text-delta':
        case 'reasoning-delta': {
          const type = part.type === 'text-delta' ? 'text' : 'reasoning';
          const text = open.get(`${type}:${part.id}`);
          if (text === undefined) break;
          text.text += part.delta;
          if (part.delta !== '') tell(onDelta, { type, text: part.delta });
          break;
        }
        case 'text-end':
        case 'reasoning-end': {
          const text = open.get(`${part.type === 'text-end' ? 'text' : 'reasoning'}:${part.id}`);
          if (text !== undefined && part.providerMetadata !== undefined) {
            text.providerMetadata = { ...text.providerMetadata, ...part.providerMetadata };
          }
          break;
        }
        case 'tool-input-start':
          if (part.providerExecuted === true) break;
          inputs.set(part.id, inputs.size);
          tell(onDelta, { type: 'tool-call-start', index: inputs.get(part.id)!, toolName: part.toolName });
          break;
        case 'tool-input-delta': {
          const index = inputs.get(part.id);
          if (index !== undefined && part.delta !== '')
            tell(onDelta, { type: 'tool-input', index, text: part.delta });
          break;
        }
        case 'tool-call':
          if (part.providerExecuted !== true && !inputs.has(part.toolCallId)) {
            inputs.set(part.toolCallId, inputs.size);
            tell(onDelta, {
              type: 'tool-call-start',
              index: inputs.get(part.toolCallId)!,
              toolName: part.toolName,
            });
          }
          content.push(part);
          break;
        case 'response-metadata':
          if (part.modelId !== undefined) modelId = part.modelId;
          break;
        case 'finish':
          finishReason = part.finishReason;
          usage = part.usage;
          break;
        case 'error':
          throw part.error;
        default:
          break;
      }
    }
  } finally {
    reader.releaseLock();
  }
  if (finishReason === undefined || usage === undefined) {
    throw new TypeError('the model stream ended without a finish part (the connection may have dropped)');
  }
  tell(onDelta, { type: 'finish', finishReason: finishReason.unified });
  return {
    content,
    finishReason,
    usage,
    warnings: [],
    ...(modelId === undefined ? {} : { response: { modelId } }),
  };
}

/** The tools as the provider takes them (description and JSON Schema), made once per tool list. */
const describedTools = new WeakMap<readonly Tool[], Promise<DescribedTools>>();

function providerTools(sdk: AiRuntime, tools: readonly Tool[]): Promise<DescribedTools> {
  let described = describedTools.get(tools);
  if (described === undefined) {
    described = sdk.describeTools(toolSet(sdk, tools));
    describedTools.set(tools, described);
    // A failure is not kept: the next call describes the tools again.
    void described.catch(() => describedTools.delete(tools));
  }
  return described;
}

/** The tools as the SDK sees them: description and JSON Schema, and no `execute`. */
function toolSet({ ai }: AiRuntime, tools: readonly Tool[]): ToolSet {
  const set: ToolSet = {};
  for (const t of tools) {
    const schema = { ...t.jsonSchema };
    delete schema.$schema; // the dialect marker; some providers refuse it
    // Arguments are validated by the runtime against the tool's zod schema, so only JSON is parsed.
    set[t.name] = ai.tool({
      description: t.description,
      inputSchema: ai.jsonSchema<unknown>(schema as JSONSchema7),
      ...(t.strict ? { strict: true } : {}),
    });
  }
  return set;
}

/** The model's response: its text, and each call it asks for parsed as generateText would. */
function turnOf(
  sdk: AiRuntime,
  result: LanguageModelV3GenerateResult,
  tools: readonly Tool[],
  configuredModelId: string,
): ModelTurn {
  const names = new Set(tools.map((t) => t.name));
  let text = '';
  const parts: ModelTurnPart[] = [];
  const toolCalls: ModelToolCall[] = [];
  for (const part of result.content) {
    if (part.type === 'text' || part.type === 'reasoning') {
      if (part.type === 'text') text += part.text;
      // An empty part is dropped, unless the provider attached something to it (an encrypted reasoning).
      if (part.text === '' && part.providerMetadata === undefined) continue;
      parts.push({
        type: part.type,
        text: part.text,
        ...(part.providerMetadata === undefined ? {} : { providerMetadata: part.providerMetadata }),
      });
    } else if (part.type === 'tool-call' && part.providerExecuted !== true) {
      toolCalls.push(modelToolCall(part, names));
    }
  }
  const usage = usageOf(sdk.internal.asLanguageModelUsage(result.usage));
  return {
    text,
    parts,
    modelId: result.response?.modelId ?? configuredModelId,
    toolCalls,
    finishReason: result.finishReason.unified,
    ...(usage === undefined ? {} : { usage }),
  };
}

type ToolCallContent = Extract<LanguageModelV3Content, { type: 'tool-call' }>;

function modelToolCall(call: ToolCallContent, names: ReadonlySet<string>): ModelToolCall {
  const modelToolCallId = call.toolCallId === '' ? undefined : call.toolCallId;
  const base = {
    modelToolCallId,
    toolName: call.toolName,
    ...(call.providerMetadata === undefined ? {} : { providerMetadata: call.providerMetadata }),
  };
  // An empty input is an empty object, as the SDK reads it.
  const parsed = call.input.trim() === '' ? { ok: true as const, value: {} } : parseJson(call.input);
  const input = parsed.ok ? parsed.value : call.input;
  if (!names.has(call.toolName)) {
    return { ...base, input, problem: problemOf(call.toolName, [...names]) };
  }
  if (!parsed.ok)
    return { ...base, input, problem: `the input for tool "${call.toolName}" is not valid JSON` };
  return { ...base, input };
}

function parseJson(text: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch {
    return { ok: false };
  }
}

function problemOf(toolName: string, names: readonly string[]): string {
  return `there is no tool named "${toolName}"; the tools are: ${names.length > 0 ? names.join(', ') : '(none)'}`;
}

function usageOf(usage: LanguageModelUsage): ModelUsage | undefined {
  const picked: { -readonly [K in keyof ModelUsage]: ModelUsage[K] } = {};
  if (usage.inputTokens !== undefined) picked.inputTokens = usage.inputTokens;
  if (usage.outputTokens !== undefined) picked.outputTokens = usage.outputTokens;
  if (usage.totalTokens !== undefined) picked.totalTokens = usage.totalTokens;
  const reasoning = usage.outputTokenDetails?.reasoningTokens;
  if (reasoning !== undefined) picked.reasoningTokens = reasoning;
  const cached = usage.inputTokenDetails?.cacheReadTokens;
  if (cached !== undefined) picked.cachedInputTokens = cached;
  return Object.keys(picked).length > 0 ? picked : undefined;
}

function callFailed({ ai }: AiRuntime, model: OncelyLanguageModel, error: unknown): OncelyError {
  const name = `${model.provider}/${model.modelId}`;
  if (ai.RetryError.isInstance(error)) {
    return new OncelyError(
      'MODEL_CALL_FAILED',
      `the call to model ${name} failed ${error.errors.length} times: ${messageOf(error.lastError)}; ` +
        'the provider may be down or rate limiting; the run waits and tries the step again',
      {
        cause: error,
        details: { model: name, attempts: error.errors.length, transient: isRetryable(error.lastError) },
      },
    );
  }
  const status =
    APICallError.isInstance(error) && error.statusCode !== undefined ? ` (HTTP ${error.statusCode})` : '';
  const transient = isRetryable(error);
  return new OncelyError(
    'MODEL_CALL_FAILED',
    `the call to model ${name} failed${status}: ${messageOf(error)}; ` +
      (transient
        ? 'the provider may be down; the run waits and tries the step again'
        : 'check the model name, its key and its base URL'),
    { cause: error, details: { model: name, attempts: 1, transient } },
  );
}

/** A provider error the SDK would retry (429, 5xx, a lost connection): it may pass. */
function isRetryable(error: unknown): boolean {
  if (APICallError.isInstance(error)) return error.isRetryable;
  return error instanceof TypeError; // fetch failed: the connection, not the request
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
