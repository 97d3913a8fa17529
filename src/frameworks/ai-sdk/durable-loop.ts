import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3Middleware,
  LanguageModelV3StreamPart,
  LanguageModelV3StreamResult,
} from '@ai-sdk/provider';
import { wrapLanguageModel } from 'ai';
import { executeToolCall, type Ledger, type ToolCallOutcome } from '../../calls/index.js';
import { OncelyError, isOncelyError } from '../../errors/index.js';
import type { JsonValue } from '../../ledger/index.js';
import type { LoopStep } from '../../store/index.js';
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
import { heardRejected } from '../../runs/heard.js';
import { aiSdkTool, heardOf } from './guarded-tool.js';

export interface DurableLoopOptions {
  /** The ledger the loop's calls are guarded by (`openLedger(url)`); its store keeps the model's responses too. */
  readonly ledger: Ledger;
  readonly tenantId: string;
  /**
   * The run this loop is: the same id after a restart continues it (the same model responses, the
   * same keys). 1-200 characters, no `:` (keys are `<runId>:<toolCallId>`).
   */
  readonly runId: string;
}

/** Why a loop stopped before the model could be asked again: a call nobody knows the outcome of, or one waiting for approval. */
export type LoopStop = OncelyError;

/**
 * One run of an agent loop the application drives itself with the AI SDK (`generateText`,
 * `streamText`), made durable: `model()` records each model response under the run and step before
 * any of its tools runs (tool call ids minted here, never the provider's) and replays it after a
 * restart; `tools()` runs each tool under the ledger with the key `<runId>:<toolCallId>`. A call
 * whose outcome is unknown stops the loop: the model is not asked again, and `run()` throws
 * `RUN_CALL_UNKNOWN` naming the key to settle.
 *
 * @example
 * const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-42' });
 * const result = await loop.run(() =>
 *   generateText({ model: loop.model(openai('gpt-4.1')), tools: loop.tools([issueCredit]),
 *     stopWhen: stepCountIs(8), prompt: 'Refund order 42' }),
 * );
 */
export class DurableLoop {
  readonly ledger: Ledger;
  readonly tenantId: string;
  readonly runId: string;
  /** The tool call ids of the responses this loop recorded or replayed: the only ones its tools run. */
  readonly #minted = new Set<string>();
  /** What a tool's outcome tells the model, by tool call id, when it is not the tool's own result. */
  readonly #heard = new Map<string, { type: 'json' | 'error-json'; value: JsonValue }>();
  #stop: LoopStop | undefined;

  constructor(options: DurableLoopOptions) {
    if (!/^[^:\s]{1,200}$/.test(options.runId)) {
      throw new OncelyError(
        'RUN_INPUT_INVALID',
        `runId "${options.runId}" is not valid: use 1-200 characters, no ":" and no spaces`,
      );
    }
    this.ledger = options.ledger;
    this.tenantId = options.tenantId;
    this.runId = options.runId;
  }

  /** Why the loop stopped, once it has: the model will not be asked again until it is settled. */
  get stopped(): LoopStop | undefined {
    return this.#stop;
  }

  /** The model, wrapped so each response is recorded before its tools run and replayed after a restart. */
  model(model: LanguageModelV3): LanguageModelV3 {
    const problem = modelProblem(model);
    if (problem !== undefined)
      throw new OncelyError('MODEL_CONFIG_INVALID', `loop.model(): the model ${problem}`);
    return wrapLanguageModel({ model, middleware: this.#middleware() });
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

  /**
   * Runs the application's loop and throws if it stopped: an unknown call (`RUN_CALL_UNKNOWN`) or a
   * call waiting for approval (`APPROVAL_REQUIRED`), even when the AI SDK ended the loop itself.
   */
  async run<T>(loop: () => Promise<T>): Promise<T> {
    const value = await loop();
    if (this.#stop !== undefined) throw this.#stop;
    return value;
  }

  /** The model responses recorded for this run, in order. */
  steps(): Promise<LoopStep[]> {
    return this.ledger.store.loopSteps.list(this.tenantId, this.runId);
  }

  #middleware(): LanguageModelV3Middleware {
    return {
      specificationVersion: 'v3',
      wrapGenerate: async ({ doGenerate, params, model }) => {
        const standing = await this.#standing(params);
        if (standing !== undefined) return toGenerateResult(standing);
        const result = await doGenerate();
        const recorded = toRecorded({ ...result, content: mintedContent(result.content) });
        return toGenerateResult(await this.#record(params, recorded, model.modelId));
      },
      wrapStream: async ({ doStream, params, model }) => {
        const standing = await this.#standing(params);
        if (standing !== undefined) return { stream: streamOf(toStreamParts(standing)) };
        const result = await doStream();
        return { ...result, stream: this.#recordStream(result, params, model.modelId) };
      },
    };
  }

  /** Refuses a model call once the loop stopped; else the response recorded for this step, if any. */
  async #standing(params: LanguageModelV3CallOptions): Promise<RecordedResponse | undefined> {
    if (this.#stop !== undefined) throw this.#stop;
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
      if (part.type === 'tool-call' && part.providerExecuted !== true) this.#minted.add(part.toolCallId);
    }
    return recorded;
  }

  /** Holds back the response's tool calls until it is recorded, so no tool runs on an unrecorded id. */
  #recordStream(
    result: LanguageModelV3StreamResult,
    params: LanguageModelV3CallOptions,
    modelId: string,
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
    if (!this.#minted.has(toolCallId)) {
      throw this.#stopWith(
        new OncelyError(
          'LOOP_CALL_NOT_MINTED',
          `tool call ${toolCallId} of "${tool.name}" did not come through loop.model(...): its id is the provider's, ` +
            'which a restart would not give again; pass the model as loop.model(yourModel)',
        ),
      );
    }
    let outcome: ToolCallOutcome;
    try {
      outcome = await executeToolCall(
        this.ledger,
        tool,
        args,
        { tenantId: this.tenantId, runId: this.runId, toolCallId },
        signal === undefined ? {} : { signal },
      );
    } catch (error) {
      if (isOncelyError(error, 'APPROVAL_REQUIRED')) this.#stopWith(error);
      if (isOncelyError(error, 'APPROVAL_REJECTED')) {
        const told = heardRejected(error.message);
        this.#heard.set(toolCallId, { type: told.type, value: told.value });
        return told.value;
      }
      throw error;
    }
    const heard = heardOf(outcome);
    if (heard === undefined) throw this.#stopWith(unknownCallError(outcome, tool, this.runId));
    if (heard.kind === 'result') return heard.value;
    this.#heard.set(toolCallId, { type: heard.type, value: heard.value });
    return heard.value;
  }

  #stopWith(error: OncelyError): OncelyError {
    this.#stop ??= error;
    return error;
  }
}

/**
 * The loop's stop on an unknown call. While the call's last attempt may still land (a process that
 * died mid call, whose attempt has not timed out yet), `details.retryAt` says when running the loop
 * again can ask the reconcile hook; `null` when only a settlement can move it.
 */
function unknownCallError(outcome: ToolCallOutcome, tool: Tool, runId: string): OncelyError {
  const key = outcome.record.idempotencyKey;
  const waiting = outcome.status === 'unknown' ? outcome.waiting : undefined;
  const retryAt = waiting?.retryAt ?? null;
  const later =
    retryAt === null
      ? ''
      : ` Its last attempt may still land until ${retryAt}; running the loop again after that asks its reconcile hook.`;
  return new OncelyError(
    'RUN_CALL_UNKNOWN',
    `tool call ${key} (${tool.name}) may or may not have taken effect; the loop stopped and the model was not told.${later} ` +
      `Settle it (its reconcile hook, or \`oncely executions resolve ${key} --status completed|failed --reason ...\`), then run the loop again`,
    { details: { idempotencyKey: key, tool: tool.name, runId, retryAt } },
  );
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
