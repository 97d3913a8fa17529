import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3FinishReason,
  LanguageModelV3GenerateResult,
  LanguageModelV3Prompt,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
  LanguageModelV3Usage,
} from '@ai-sdk/provider';
import { OncelyError } from '../errors/index.js';
import { realClock, type Clock } from '../util/clock.js';

/** One tool call a scripted model makes. */
export interface ScriptToolCall {
  readonly toolName: string;
  /** The arguments; sent to the runtime as JSON. */
  readonly input?: unknown;
  /**
   * The text sent as the call's input instead of `JSON.stringify(input)`, to play a model that
   * produces broken JSON.
   */
  readonly rawInput?: string;
  /** The provider's id for the call; by default `model_call_<n>`, repeated on every turn. */
  readonly id?: string;
}

/** One response of a scripted model: a step with tool calls finishes `tool-calls`, otherwise `stop`. */
export interface ScriptStep {
  readonly text?: string;
  readonly toolCalls?: readonly ScriptToolCall[];
  /** The tokens the response reports (as a provider's would); by default it reports none. */
  readonly usage?: ScriptUsage;
}

/** The token counts a scripted response reports. */
export interface ScriptUsage {
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** Of the output, spent reasoning. */
  readonly reasoningTokens?: number;
  /** Of the input, read from the provider's cache. */
  readonly cachedInputTokens?: number;
}

/**
 * Either the responses in order, or a function choosing one. `turn` is the number of assistant
 * messages already in the prompt, so a replay of the same step gets the same response.
 */
export type Script =
  readonly ScriptStep[] | ((prompt: LanguageModelV3Prompt, turn: number) => ScriptStep | Promise<ScriptStep>);

export interface ScriptedModelOptions {
  /** Reported as the model id; default `scripted`. */
  readonly modelId?: string;
  /**
   * Milliseconds each response takes, as a network model's would (a drill kills processes while
   * they wait on the model); the call's abort signal ends the wait. Default 0.
   */
  readonly latencyMs?: number;
  /**
   * Milliseconds between the pieces of a streamed response (`doStream` sends the text a word at a
   * time, and each call's input in pieces), as a network model streams. Default 0.
   */
  readonly chunkDelayMs?: number;
  /** The time of those waits; default the machine's. A simulation passes the runtime's clock. */
  readonly clock?: Clock;
}

/** A language model that plays a script, and remembers every prompt it was given. */
export interface ScriptedModel extends LanguageModelV3 {
  /** Every prompt received, in order: what the model heard, for tests to assert. */
  readonly received: readonly LanguageModelV3Prompt[];
}

const NO_USAGE: LanguageModelV3Usage = {
  inputTokens: { total: undefined, noCache: undefined, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: undefined, text: undefined, reasoning: undefined },
};

class ScriptedLanguageModel implements ScriptedModel {
  readonly specificationVersion = 'v3';
  readonly provider = 'oncely';
  readonly modelId: string;
  /** It reads no file: a file part by URL is passed to it as the URL, never downloaded. */
  readonly supportedUrls: Record<string, RegExp[]> = { '*/*': [/^https?:\/\//] };
  readonly #script: Script;
  readonly #latencyMs: number;
  readonly #chunkDelayMs: number;
  readonly #clock: Clock;
  readonly #received: LanguageModelV3Prompt[] = [];

  constructor(script: Script, options: ScriptedModelOptions) {
    this.#script = script;
    this.modelId = options.modelId ?? 'scripted';
    this.#latencyMs = options.latencyMs ?? 0;
    this.#chunkDelayMs = options.chunkDelayMs ?? 0;
    this.#clock = options.clock ?? realClock;
  }

  get received(): readonly LanguageModelV3Prompt[] {
    return this.#received;
  }

  async doGenerate(options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
    const step = await this.#next(options);
    return { content: contentOf(step), finishReason: finishOf(step), usage: usageOf(step), warnings: [] };
  }

  async doStream(options: LanguageModelV3CallOptions): Promise<LanguageModelV3StreamResult> {
    const step = await this.#next(options);
    const parts: LanguageModelV3StreamPart[] = [{ type: 'stream-start', warnings: [] }];
    for (const part of contentOf(step)) {
      if (part.type === 'text') {
        parts.push({ type: 'text-start', id: 'text_1' });
        for (const word of part.text.match(/\S+\s*|\s+/g) ?? []) {
          parts.push({ type: 'text-delta', id: 'text_1', delta: word });
        }
        parts.push({ type: 'text-end', id: 'text_1' });
      } else if (part.type === 'tool-call') {
        parts.push({ type: 'tool-input-start', id: part.toolCallId, toolName: part.toolName });
        for (let at = 0; at < part.input.length; at += 16) {
          parts.push({ type: 'tool-input-delta', id: part.toolCallId, delta: part.input.slice(at, at + 16) });
        }
        parts.push({ type: 'tool-input-end', id: part.toolCallId });
        parts.push(part);
      }
    }
    parts.push({ type: 'finish', finishReason: finishOf(step), usage: usageOf(step) });
    const delayMs = this.#chunkDelayMs;
    const clock = this.#clock;
    const signal = options.abortSignal;
    let next = 0;
    const stream = new ReadableStream<LanguageModelV3StreamPart>({
      async pull(controller) {
        if (next > 0 && delayMs > 0) await clock.sleep(delayMs, signal);
        const part = parts[next++];
        if (part === undefined) controller.close();
        else controller.enqueue(part);
      },
    });
    return { stream };
  }

  async #next(options: LanguageModelV3CallOptions): Promise<ScriptStep> {
    options.abortSignal?.throwIfAborted();
    if (this.#latencyMs > 0) {
      await this.#clock.sleep(this.#latencyMs, options.abortSignal);
    }
    const prompt = options.prompt;
    this.#received.push(prompt);
    const turn = prompt.filter((message) => message.role === 'assistant').length;
    if (typeof this.#script === 'function') return this.#script(prompt, turn);
    const step = this.#script[turn];
    if (step === undefined) {
      throw new OncelyError(
        'MODEL_OUTPUT_INVALID',
        `the scripted model ran out of script: turn ${turn + 1} needs step ${turn + 1}, but the script has ` +
          `${this.#script.length} step(s); add a step, or end the run with a text-only step`,
      );
    }
    return step;
  }
}

function usageOf(step: ScriptStep): LanguageModelV3Usage {
  const usage = step.usage;
  if (usage === undefined) return NO_USAGE;
  const cached = usage.cachedInputTokens ?? 0;
  const reasoning = usage.reasoningTokens ?? 0;
  return {
    inputTokens: {
      total: usage.inputTokens,
      noCache: usage.inputTokens - cached,
      cacheRead: cached,
      cacheWrite: undefined,
    },
    outputTokens: { total: usage.outputTokens, text: usage.outputTokens - reasoning, reasoning },
  };
}

function contentOf(step: ScriptStep): LanguageModelV3Content[] {
  const content: LanguageModelV3Content[] = [];
  if (step.text !== undefined && step.text !== '') content.push({ type: 'text', text: step.text });
  (step.toolCalls ?? []).forEach((call, index) => {
    content.push({
      type: 'tool-call',
      toolCallId: call.id ?? `model_call_${index + 1}`,
      toolName: call.toolName,
      input: call.rawInput ?? JSON.stringify(call.input ?? {}),
    });
  });
  return content;
}

function finishOf(step: ScriptStep): LanguageModelV3FinishReason {
  const calls = (step.toolCalls ?? []).length > 0;
  return calls ? { unified: 'tool-calls', raw: 'tool_calls' } : { unified: 'stop', raw: 'stop' };
}

/**
 * A model that needs no network and no key: it answers from a script. Tool calls get ids
 * `model_call_1`, `model_call_2`, … that repeat on every turn, as real providers' ids may, so a test
 * proves the runtime never trusts them.
 *
 * @example
 * const model = scriptedModel([
 *   { toolCalls: [{ toolName: 'issue_credit', input: { accountId: 'acct_1', amountCents: 2500 } }] },
 *   { text: 'I credited $25.' },
 * ]);
 */
export function scriptedModel(script: Script, options: ScriptedModelOptions = {}): ScriptedModel {
  return new ScriptedLanguageModel(script, options);
}
