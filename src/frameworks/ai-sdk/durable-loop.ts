import type {
  LanguageModelV3CallOptions,
  LanguageModelV3Middleware,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
} from '@ai-sdk/provider';
import { wrapLanguageModel } from 'ai';
import { OncelyError } from '../../errors/index.js';
import type { JsonValue } from '../../ledger/index.js';
import { assertTool, type Tool } from '../../tools/index.js';
import {
  IdMinter,
  StreamCollector,
  mintedContent,
  plainJson,
  promptDigest,
  stepOf,
  toGenerateResult,
  toRecorded,
  toStreamParts,
  type RecordedResponse,
} from './recorded-response.js';
import { modelProblem } from '../../models/model-version.js';
import type { OncelyLanguageModel } from '../../models/ai-runtime.js';
import type { LoopStep } from '../../store/index.js';
import {
  LoopRun,
  answerAttributes,
  type LoopRunOptions,
  type ModelCallAnswer,
  type ModelCallFacts,
} from '../loop-run.js';
import { failSpan, streamInSpan, type Span } from '../../tracing/index.js';
import { correctionOwed } from '../../runs/corrections.js';
import { aiSdkTool, heardOfRecordedCall } from './guarded-tool.js';

export type DurableLoopOptions = LoopRunOptions;

/**
 * Why a loop stopped before the model could be asked again: a call nobody knows the outcome of, one
 * waiting for approval, or a repeat waiting for the earlier call it repeats to be settled.
 */
export type LoopStop = OncelyError;

/**
 * One run of an agent loop the application drives itself with the AI SDK (`generateText`,
 * `streamText`), made durable: `model()` records each model response under the run and step before
 * any of its tools runs (tool call ids minted here, never the provider's) and replays it after a
 * restart; `tools()` runs each tool under the ledger with the key `<runId>:<toolCallId>`. A call
 * whose outcome is unknown stops the loop: the model is not asked again, and `run()` throws
 * `RUN_CALL_UNKNOWN` naming the key to settle, or `CALL_IN_FLIGHT` (with when to look again) while
 * its attempt is still running in another process. A call that repeats an earlier one of the run
 * (same tool, same `repeatKey`) is asked about (`APPROVAL_REQUIRED`, the loop stops), refused (the
 * model hears `repeat_refused`) or run, as `onRepeat` says.
 *
 * @example
 * const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-42' });
 * const result = await loop.run(() =>
 *   generateText({ model: loop.model(openai('gpt-4.1')), tools: loop.tools([issueCredit]),
 *     stopWhen: stepCountIs(8), prompt: 'Refund order 42' }),
 * );
 */
export class DurableLoop extends LoopRun {
  protected readonly framework = 'ai-sdk';
  /** What a tool's outcome tells the model, by tool call id, when it is not the tool's own result. */
  readonly #heard = new Map<string, { type: 'json' | 'error-json'; value: JsonValue }>();

  /**
   * The model, wrapped so each response is recorded before its tools run and replayed after a
   * restart: a model of the AI SDK installed (6: specification v3; 7: v3 or v4), wrapped by that
   * SDK's own `wrapLanguageModel` (under AI SDK 7 the result is a v4 model, whatever it wraps).
   */
  model(model: OncelyLanguageModel): OncelyLanguageModel {
    const problem = modelProblem(model);
    if (problem !== undefined)
      throw new OncelyError('MODEL_CONFIG_INVALID', `loop.model(): the model ${problem}`);
    // The middleware reads only what specifications v3 and v4 share (text, reasoning, tool calls,
    // usage): typed for AI SDK 6, it is given as it is to AI SDK 7's wrapLanguageModel too.
    type Wrapping = Parameters<typeof wrapLanguageModel>[0];
    return wrapLanguageModel({
      model,
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- needed against AI SDK 7's types
      middleware: this.#middleware() as unknown as Wrapping['middleware'],
    });
  }

  /** The tools as AI SDK tools, each call run under the ledger (`<runId>:<toolCallId>`). */
  tools(
    tools: readonly Tool[] | Readonly<Record<string, Tool>>,
  ): Record<string, ReturnType<typeof aiSdkTool>> {
    const list = Array.isArray(tools) ? (tools as readonly Tool[]) : Object.values(tools);
    const set: Record<string, ReturnType<typeof aiSdkTool>> = {};
    for (const tool of list) {
      assertTool(tool);
      set[tool.name] = aiSdkTool(tool, {
        execute: (args, toolCallId, signal) => this.#execute(tool, args, toolCallId, signal),
        heard: (toolCallId) => this.#heard.get(toolCallId),
      });
    }
    return set;
  }

  #middleware(): LanguageModelV3Middleware {
    return {
      specificationVersion: 'v3',
      wrapGenerate: ({ doGenerate, params, model }) => {
        this.assertGoing(); // a call refused once the loop stopped asks nothing: no span
        return this.inModelSpan(factsOf(model, params), async (span) => {
          const standing = await this.#standing(params);
          if (standing !== undefined) {
            answerAttributes(span, answerOf(standing, true));
            return toGenerateResult(standing);
          }
          const corrected = await this.#corrected(params);
          const result = corrected === undefined ? await doGenerate() : await model.doGenerate(corrected);
          const recorded = toRecorded({ ...result, content: mintedContent(result.content) });
          const stands = await this.#record(params, recorded, model.modelId);
          answerAttributes(span, answerOf(stands, false));
          return toGenerateResult(stands);
        });
      },
      wrapStream: async ({ doStream, params, model }) => {
        this.assertGoing();
        const span = this.startModelSpan(factsOf(model, params));
        try {
          const standing = await this.#standing(params);
          if (standing !== undefined) {
            answerAttributes(span, answerOf(standing, true));
            return { stream: streamInSpan(streamOf(toStreamParts(standing)), span) };
          }
          const corrected = await this.#corrected(params);
          const result = corrected === undefined ? await doStream() : await model.doStream(corrected);
          const stream = this.#recordStream(result, params, model.modelId, span);
          return { ...result, stream: streamInSpan(stream, span) };
        } catch (error) {
          failSpan(span, error);
          span.end();
          throw error;
        }
      },
    };
  }

  /**
   * The call with the correction the model is owed (a call it was told did not take effect, whose
   * effect then landed) after the conversation, or undefined. Only the model sees it: the step is
   * recorded under the conversation as the application sent it, so a replay finds it, and the
   * correction is sent again with every later call (the application's history does not keep it).
   */
  async #corrected(params: LanguageModelV3CallOptions): Promise<LanguageModelV3CallOptions | undefined> {
    const prompt = params.prompt as unknown as JsonValue[];
    const correction = await correctionOwed(this.ledger, this.tenantId, this.runId, prompt);
    if (correction === undefined) return undefined;
    return { ...params, prompt: [...prompt, correction] as unknown as LanguageModelV3CallOptions['prompt'] };
  }

  /** Refuses a model call once the loop stopped; else the response recorded for this step, if any. */
  async #standing(params: LanguageModelV3CallOptions): Promise<RecordedResponse | undefined> {
    this.assertGoing();
    const step = await this.ledger.store.loopSteps.get(this.tenantId, this.runId, stepOf(params.prompt));
    if (step === undefined) return undefined;
    return this.#replayable(step, promptDigest(params.prompt));
  }

  async #record(
    params: LanguageModelV3CallOptions,
    response: RecordedResponse,
    modelId: string,
  ): Promise<RecordedResponse> {
    const digest = promptDigest(params.prompt);
    const { step } = await this.ledger.store.loopSteps.record({
      tenantId: this.tenantId,
      runId: this.runId,
      step: stepOf(params.prompt),
      promptDigest: digest,
      response: response as unknown as JsonValue,
      modelId,
      usage: plainJson(response.usage),
    });
    // Another process may have recorded this step first: its response is the one that stands.
    return this.#replayable(step, digest);
  }

  #replayable(step: LoopStep, digest: string): RecordedResponse {
    if (step.promptDigest !== digest) {
      throw new OncelyError(
        'LOOP_DIVERGED',
        `step ${step.step} of run ${this.runId} was recorded for another conversation: the messages before it ` +
          'are not the ones it answered (a restart must send the same conversation; a new conversation needs a new runId)',
        { details: { runId: this.runId, step: step.step } },
      );
    }
    const recorded = step.response as unknown as RecordedResponse;
    for (const part of recorded.content) {
      if (part.type === 'tool-call' && part.providerExecuted !== true) this.minted.add(part.toolCallId);
    }
    return recorded;
  }

  /** Holds back the response's tool calls until it is recorded, so no tool runs on an unrecorded id. */
  #recordStream(
    result: LanguageModelV3StreamResult,
    params: LanguageModelV3CallOptions,
    modelId: string,
    span: Span,
  ): ReadableStream<LanguageModelV3StreamPart> {
    const minter = new IdMinter();
    const byProvider = new Set<string>();
    const collector = new StreamCollector();
    const held: LanguageModelV3StreamPart[] = [];
    return result.stream.pipeThrough(
      new TransformStream<LanguageModelV3StreamPart, LanguageModelV3StreamPart>({
        transform: async (raw, controller) => {
          if (raw.type === 'tool-call' && raw.providerExecuted === true) byProvider.add(raw.toolCallId);
          const part = minter.part(raw, byProvider);
          collector.add(part);
          if (part.type === 'tool-call' || part.type === 'tool-approval-request') held.push(part);
          else if (part.type === 'finish') {
            const recorded = await this.#record(
              params,
              toRecorded({
                content: collector.content,
                finishReason: part.finishReason,
                usage: part.usage,
                ...(part.providerMetadata === undefined ? {} : { providerMetadata: part.providerMetadata }),
                response: collector.response,
              }),
              modelId,
            );
            answerAttributes(span, answerOf(recorded, false));
            // What stands is sent: this stream's calls, or another process's if it recorded the step first.
            for (const p of recorded.content) {
              if (p.type === 'tool-call' || p.type === 'tool-approval-request') controller.enqueue(p);
            }
            controller.enqueue(part);
          } else controller.enqueue(part);
        },
      }),
    );
  }

  async #execute(
    tool: Tool,
    args: unknown,
    toolCallId: string,
    signal: AbortSignal | undefined,
  ): Promise<unknown> {
    if (!this.minted.has(toolCallId)) throw this.notMinted(tool, toolCallId, 'loop.model(...)');
    const call = await this.guarded(tool, args, toolCallId, signal);
    if ('told' in call) {
      this.#heard.set(toolCallId, { type: call.told.type, value: call.told.value });
      return call.told.value;
    }
    const heard = await heardOfRecordedCall(this.ledger.store.ledger, call.outcome);
    if (heard === undefined) throw this.unknownCall(call.outcome, tool);
    if (heard.kind === 'result') return heard.value;
    this.#heard.set(toolCallId, { type: heard.type, value: heard.value });
    return heard.value;
  }
}

/** Starts (or, with the same `runId`, continues) a durable loop. */
export function durableLoop(options: DurableLoopOptions): DurableLoop {
  return new DurableLoop(options);
}

function streamOf(parts: readonly LanguageModelV3StreamPart[]): ReadableStream<LanguageModelV3StreamPart> {
  return new ReadableStream({
    start(controller) {
      for (const part of parts) controller.enqueue(part);
      controller.close();
    },
  });
}

function factsOf(
  model: { modelId: string; provider: string },
  params: LanguageModelV3CallOptions,
): ModelCallFacts {
  return { model: model.modelId, provider: model.provider, step: stepOf(params.prompt) };
}

/** What a recorded response says of the model call, for its span (usage of specifications v3 and v4). */
function answerOf(recorded: RecordedResponse, replayed: boolean): ModelCallAnswer {
  const tokens = (count: unknown): number | undefined => {
    const total = typeof count === 'object' && count !== null ? (count as { total?: unknown }).total : count;
    return typeof total === 'number' ? total : undefined;
  };
  const finish = recorded.finishReason as unknown;
  const finishReason =
    typeof finish === 'string' ? finish : (finish as { unified?: string } | undefined)?.unified;
  return {
    model: recorded.response?.modelId,
    inputTokens: tokens(recorded.usage.inputTokens),
    outputTokens: tokens(recorded.usage.outputTokens),
    finishReason,
    toolCalls: recorded.content.filter((p) => p.type === 'tool-call' && p.providerExecuted !== true).length,
    replayed,
  };
}
