import { createHash } from 'node:crypto';
import {
  Usage,
  tool as agentsTool,
  type FunctionTool,
  type Model,
  type ModelRequest,
  type ModelResponse,
  type StreamEvent,
} from '@openai/agents-core';
import { approvalOf, prepareCall } from '../../calls/index.js';
import { OncelyError } from '../../errors/index.js';
import { canonicalJson, type JsonValue } from '../../ledger/index.js';
import { mintToolCallId } from '../../runs/messages.js';
import type { LoopStep } from '../../store/index.js';
import { assertTool, type Tool } from '../../tools/index.js';
import { heardOfRecordedCall } from '../ai-sdk/guarded-tool.js';
import {
  LoopRun,
  answerAttributes,
  type LoopRunOptions,
  type ModelCallAnswer,
  type ModelCallFacts,
} from '../loop-run.js';
import { failSpan, type Span } from '../../tracing/index.js';
import { plainJson } from '../ai-sdk/recorded-response.js';

/*
 * A run of an OpenAI Agents JS agent (`run(agent, input)` of @openai/agents), made durable the same
 * way as an AI SDK loop: the model wrapper records each response in the store (table loop_steps)
 * before the runner sees its function calls, with call ids oncely minted, and replays it after a
 * restart; each function tool runs under the ledger with the key `<runId>:<callId>`; an unknown call
 * stops the run (the tool's error is not handed to the model) and `run()` throws it. A repeat of an
 * earlier call of the run is asked about (the run stops with `APPROVAL_REQUIRED`), refused (its
 * output is `repeat_refused`) or run, as `onRepeat` says; one of an unknown call stops the run.
 */

export type DurableAgentRunOptions = LoopRunOptions;

/** A model response as the store keeps it (plain JSON; usage rebuilt as the SDK's Usage on replay). */
interface RecordedAgentResponse {
  readonly output: ModelResponse['output'];
  readonly usage: JsonValue;
  readonly responseId?: string;
  readonly providerData?: Record<string, unknown>;
}

/** The response that stands for a step: recorded now, or earlier (replayed). */
interface Standing {
  readonly recorded: RecordedAgentResponse;
  readonly step: number;
}

type AnyItem = { readonly type?: string; readonly callId?: string } & Record<string, unknown>;

export class DurableAgentRun extends LoopRun {
  protected readonly framework = 'openai-agents';

  /** The model, wrapped: each response recorded before its function calls run, replayed after a restart. */
  model(model: Model): Model {
    return {
      ...(model.supportsPromptModelSelection === undefined
        ? {}
        : { supportsPromptModelSelection: model.supportsPromptModelSelection }),
      getResponse: async (request) => {
        this.assertGoing(); // a call refused once the run stopped asks nothing: no span
        return this.inModelSpan(factsOf(model), async (span) => {
          const standing = await this.#standing(request);
          if (standing !== undefined) {
            answerAttributes(span, answerOf(standing, true));
            return toModelResponse(standing.recorded);
          }
          const response = await model.getResponse(request);
          const stands = await this.#record(request, recordedOf(response));
          answerAttributes(span, answerOf(stands, false));
          return toModelResponse(stands.recorded);
        });
      },
      getStreamedResponse: (request) => this.#stream(model, request),
      ...(model.getRetryAdvice === undefined ? {} : { getRetryAdvice: model.getRetryAdvice.bind(model) }),
    };
  }

  /** Oncely tools as function tools of the Agents SDK, each call run under the ledger. */
  tools(tools: readonly Tool[] | Readonly<Record<string, Tool>>): FunctionTool[] {
    const list = Array.isArray(tools) ? (tools as readonly Tool[]) : Object.values(tools);
    return list.map((t) => {
      assertTool(t);
      return agentsTool({
        name: t.name,
        description: t.description,
        parameters: t.jsonSchema as never,
        strict: t.strict,
        // A tool's error is not handed to the model: an unknown call stops the run.
        errorFunction: null,
        needsApproval: (_context: unknown, input: unknown, callId?: string) =>
          this.#needsApproval(t, input, callId),
        execute: (input: unknown, _context: unknown, details?: { toolCall?: { callId?: string } }) =>
          this.#execute(t, input, details?.toolCall?.callId),
      });
    });
  }

  /** The response recorded for this conversation, if any; refuses once the run stopped. */
  async #standing(request: ModelRequest): Promise<Standing | undefined> {
    this.assertGoing();
    const digest = inputDigest(request.input);
    const steps = await this.steps();
    const same = steps.find((s) => s.promptDigest === digest);
    if (same !== undefined) return this.#replayable(same);
    const last = steps.at(-1);
    if (last !== undefined && !continues(request.input, last.response as unknown as RecordedAgentResponse)) {
      throw diverged(this.runId, steps.length);
    }
    return undefined;
  }

  async #record(request: ModelRequest, response: RecordedAgentResponse): Promise<Standing> {
    const digest = inputDigest(request.input);
    const step = (await this.steps()).length;
    const { step: standing } = await this.ledger.store.loopSteps.record({
      tenantId: this.tenantId,
      runId: this.runId,
      step,
      promptDigest: digest,
      response: response as unknown as JsonValue,
      modelId: 'openai-agents',
      usage: response.usage,
    });
    if (standing.promptDigest !== digest) throw diverged(this.runId, step);
    return this.#replayable(standing);
  }

  #replayable(step: LoopStep): Standing {
    const recorded = step.response as unknown as RecordedAgentResponse;
    for (const item of recorded.output as unknown as AnyItem[]) {
      if (item.type === 'function_call' && typeof item.callId === 'string') this.minted.add(item.callId);
    }
    return { recorded, step: step.step };
  }

  async *#stream(model: Model, request: ModelRequest): AsyncIterable<StreamEvent> {
    this.assertGoing();
    const span = this.startModelSpan(factsOf(model));
    try {
      yield* this.#streamed(model, request, span);
    } catch (error) {
      failSpan(span, error);
      throw error;
    } finally {
      span.end(); // also when the runner stops reading
    }
  }

  async *#streamed(model: Model, request: ModelRequest, span: Span): AsyncIterable<StreamEvent> {
    const standing = await this.#standing(request);
    if (standing !== undefined) {
      answerAttributes(span, answerOf(standing, true));
      yield { type: 'response_started' };
      yield* textDeltas(standing.recorded);
      yield doneEvent(standing.recorded);
      return;
    }
    for await (const event of model.getStreamedResponse(request)) {
      if (event.type !== 'response_done') {
        yield event;
        continue;
      }
      const { response } = event;
      const recorded = await this.#record(
        request,
        recordedOf({
          output: response.output,
          usage: new Usage(response.usage),
          responseId: response.id,
          ...(response.providerData === undefined ? {} : { providerData: response.providerData }),
        }),
      );
      answerAttributes(span, answerOf(recorded, false));
      yield doneEvent(recorded.recorded);
    }
  }

  async #needsApproval(tool: Tool, input: unknown, callId: string | undefined): Promise<boolean> {
    if (!tool.effect.approval || callId === undefined) return false;
    const key = `${this.runId}:${callId}`;
    if ((await this.ledger.store.ledger.get(this.tenantId, key)) !== undefined) return false;
    const approval = await this.ledger.store.runs.getApproval(this.tenantId, key);
    if (
      approval?.status === 'approved' ||
      approval?.status === 'consumed' ||
      approval?.status === 'rejected'
    ) {
      return false; // executeToolCall consumes it, or tells the model it was rejected
    }
    // Asked in the ledger too, so an operator sees it (`oncely approvals list`) and can decide it.
    const prepared = prepareCall({
      tool,
      args: input,
      tenantId: this.tenantId,
      runId: this.runId,
      toolCallId: callId,
    });
    await this.ledger.store.runs.createApprovals([approvalOf(prepared)]);
    return true;
  }

  async #execute(tool: Tool, input: unknown, callId: string | undefined): Promise<unknown> {
    if (callId === undefined || !this.minted.has(callId))
      throw this.notMinted(tool, callId, 'run.model(...)');
    // A call refused before it was reserved (rejected, a repeat refused) is its words as its output.
    const call = await this.guarded(tool, input, callId);
    if ('told' in call) return call.told.value;
    const heard = await heardOfRecordedCall(this.ledger.store.ledger, call.outcome);
    if (heard === undefined) throw this.unknownCall(call.outcome, tool);
    return heard.value;
  }
}

/** Starts (or, with the same `runId`, continues) a durable run of an OpenAI Agents JS agent. */
export function durableAgentRun(options: DurableAgentRunOptions): DurableAgentRun {
  return new DurableAgentRun(options);
}

/** The response with minted ids for the function calls the runner will execute, as JSON. */
function recordedOf(response: ModelResponse): RecordedAgentResponse {
  const output = (response.output as unknown as AnyItem[]).map((item) =>
    item.type === 'function_call' ? { ...item, callId: mintToolCallId() } : item,
  );
  return plainJson({
    output,
    usage: response.usage,
    ...(response.responseId === undefined ? {} : { responseId: response.responseId }),
    ...(response.providerData === undefined ? {} : { providerData: response.providerData }),
  }) as unknown as RecordedAgentResponse;
}

function toModelResponse(recorded: RecordedAgentResponse): ModelResponse {
  return {
    output: recorded.output,
    usage: new Usage(recorded.usage as ConstructorParameters<typeof Usage>[0]),
    ...(recorded.responseId === undefined ? {} : { responseId: recorded.responseId }),
    ...(recorded.providerData === undefined ? {} : { providerData: recorded.providerData }),
  };
}

/**
 * The model's name, when it says it: the SDK's OpenAI models (`OpenAIResponsesModel`,
 * `OpenAIChatCompletionsModel`) keep it as `_model`; a model of another shape gives a span named `chat`.
 */
function factsOf(model: Model): ModelCallFacts {
  const name = (model as { _model?: unknown })._model;
  return { model: typeof name === 'string' ? name : undefined, provider: undefined };
}

/** What a recorded response says of the model call, for its span. */
function answerOf({ recorded, step }: Standing, replayed: boolean): ModelCallAnswer {
  const usage = new Usage(recorded.usage as ConstructorParameters<typeof Usage>[0]);
  const model = recorded.providerData?.['model'];
  return {
    model: typeof model === 'string' ? model : undefined,
    inputTokens: usage.inputTokens,
    outputTokens: usage.outputTokens,
    toolCalls: (recorded.output as unknown as AnyItem[]).filter((i) => i.type === 'function_call').length,
    replayed,
    step,
  };
}

/**
 * The text of a recorded response as the deltas a live stream sends (one per text part of each
 * message), so a replayed step streams its text to the application (`toTextStream()`) as the first
 * run did, not only its final output.
 */
function textDeltas(recorded: RecordedAgentResponse): StreamEvent[] {
  return (recorded.output as unknown as AnyItem[]).flatMap((item) => {
    if (item.type !== 'message' || !Array.isArray(item.content)) return [];
    const itemId = typeof item.id === 'string' ? { itemId: item.id } : {};
    return (item.content as AnyItem[]).flatMap((part) =>
      part.type === 'output_text' && typeof part.text === 'string' && part.text !== ''
        ? [{ type: 'output_text_delta' as const, delta: part.text, ...itemId }]
        : [],
    );
  });
}

function doneEvent(recorded: RecordedAgentResponse): StreamEvent {
  const usage = new Usage(recorded.usage as ConstructorParameters<typeof Usage>[0]);
  return {
    type: 'response_done',
    response: {
      id: recorded.responseId ?? 'oncely-replayed',
      usage: {
        requests: usage.requests,
        inputTokens: usage.inputTokens,
        outputTokens: usage.outputTokens,
        totalTokens: usage.totalTokens,
      },
      output: recorded.output,
      ...(recorded.providerData === undefined ? {} : { providerData: recorded.providerData }),
    },
  } as StreamEvent;
}

/** Digest of the conversation a model call answers (the runner's input items; instructions left out). */
function inputDigest(input: ModelRequest['input']): string {
  const items = typeof input === 'string' ? [{ role: 'user', content: input }] : input;
  return createHash('sha256')
    .update(canonicalJson(plainJson(items)))
    .digest('hex');
}

/** Whether the input carries on from the last recorded response (its function calls are in it). */
function continues(input: ModelRequest['input'], last: RecordedAgentResponse): boolean {
  const calls = (last.output as unknown as AnyItem[]).flatMap((i) =>
    i.type === 'function_call' && typeof i.callId === 'string' ? [i.callId] : [],
  );
  if (calls.length === 0 || typeof input === 'string') return calls.length === 0;
  const present = new Set(
    (input as unknown as AnyItem[]).flatMap((i) => (typeof i.callId === 'string' ? [i.callId] : [])),
  );
  return calls.every((c) => present.has(c));
}

function diverged(runId: string, step: number): OncelyError {
  return new OncelyError(
    'LOOP_DIVERGED',
    `step ${step} of run ${runId}: the conversation is not the one recorded (a restart must send the same ` +
      'input; a new conversation needs a new runId)',
    { details: { runId, step } },
  );
}
