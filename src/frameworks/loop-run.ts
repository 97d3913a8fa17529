import {
  executeToolCalls,
  prepareCall,
  type Ledger,
  type ToolCallOutcome,
  type ToolCallRequest,
} from '../calls/index.js';
import { OncelyError, isOncelyError } from '../errors/index.js';
import { DEFAULT_REPEAT_POLICY, isValidId, type RepeatPolicy } from '../ledger/index.js';
import type { HeardResult } from '../run-state/index.js';
import { heardOfRepeatRefusal, heardRejected } from '../runs/heard.js';
import type { LoopStep } from '../store/index.js';
import type { Tool } from '../tools/index.js';
import {
  SpanKind,
  activeSpanLinks,
  activeTraceId,
  contextOf,
  definedAttributes,
  inSpan,
  runTraceContext,
  startSpan,
  type Attributes,
  type Context,
  type Span,
} from '../tracing/index.js';

/*
 * What a durable run of an application's own agent loop is, whichever framework drives it (the AI
 * SDK, OpenAI Agents JS): a run id and its recorded model responses, the call ids minted for them
 * (the only ones its tools run), and why it stopped, once it has.
 */

export interface LoopRunOptions {
  /** The ledger the calls are guarded by (`openLedger(url)`); its store keeps the model's responses too. */
  readonly ledger: Ledger;
  readonly tenantId: string;
  /** The same id after a restart continues the run; 1-128 characters of `A-Z a-z 0-9 _ . -` (keys are `<runId>:<callId>`). */
  readonly runId: string;
  /**
   * What a call that repeats an earlier call of the run (or conversation) does, when that call took
   * effect or may have (same tool, same `repeatKey`): `ask` an operator (the loop stops until the
   * approval is decided), `refuse` it (the model hears `repeat_refused`), or `allow` it.
   * Default: each tool's own `onRepeat`, else `ask`.
   */
  readonly onRepeat?: RepeatPolicy;
  /**
   * The conversation this run is a turn of, when the application starts a new `runId` for each turn
   * of a chat: repeats are then looked for across all its turns, not only this run's calls.
   * 1-128 characters of `A-Z a-z 0-9 _ . -`.
   */
  readonly conversationId?: string;
}

/** What a model call of the loop is, for its span (OpenTelemetry's GenAI conventions, as oncely's runs name it). */
export interface ModelCallFacts {
  /** The model asked for, when known: the span is `chat <model>`, else `chat`. */
  readonly model: string | undefined;
  readonly provider: string | undefined;
  /** The step this call answers, from 0 (`loop.steps()`'s numbering), when known before it is made. */
  readonly step?: number;
}

/** What a model call answered (or what was replayed for it), for its span. */
export interface ModelCallAnswer {
  readonly model?: string | undefined;
  readonly inputTokens?: number | undefined;
  readonly outputTokens?: number | undefined;
  readonly finishReason?: string | undefined;
  /** The calls the application will run. */
  readonly toolCalls: number;
  /** The response was the one recorded for this step: the model was not asked. */
  readonly replayed: boolean;
  /** The step it answers, from 0, when it was not known before the call. */
  readonly step?: number;
}

/** What became of a call of the loop: its outcome, or what the model is told of a call refused before it was reserved. */
export type LoopCall = { readonly outcome: ToolCallOutcome } | { readonly told: HeardResult };

export abstract class LoopRun {
  /** Which framework drives the loop (the run span's `oncely.loop`). */
  protected abstract readonly framework: 'ai-sdk' | 'openai-agents';
  readonly ledger: Ledger;
  readonly tenantId: string;
  readonly runId: string;
  readonly onRepeat: RepeatPolicy | undefined;
  readonly conversationId: string | undefined;
  /** The call ids of the responses this run recorded or replayed: the only ones its tools run. */
  protected readonly minted = new Set<string>();
  /** By repeat digest: the last call of this process with it, settled (see `#inTurn`). */
  readonly #turns = new Map<string, Promise<void>>();
  #stop: OncelyError | undefined;
  /** The span of `run()` while it runs: the parent of the loop's model and tool spans. */
  #runSpan: { readonly context: Context; readonly traceId: string } | undefined;

  constructor(options: LoopRunOptions) {
    if (!isValidId(options.runId)) {
      throw new OncelyError(
        'RUN_INPUT_INVALID',
        `runId ${JSON.stringify(options.runId)} is not valid: use 1-128 characters of A-Z a-z 0-9 _ . - (the ledger's rule for every run id)`,
      );
    }
    const { conversationId } = options;
    if (conversationId !== undefined && !isValidId(conversationId)) {
      throw new OncelyError(
        'RUN_INPUT_INVALID',
        `conversationId ${JSON.stringify(conversationId)} is not valid: use 1-128 characters of A-Z a-z 0-9 _ . -`,
      );
    }
    this.ledger = options.ledger;
    this.tenantId = options.tenantId;
    this.runId = options.runId;
    this.onRepeat = options.onRepeat;
    this.conversationId = options.conversationId;
  }

  /**
   * Why the run stopped, once it has: a call nobody knows the outcome of (`RUN_CALL_UNKNOWN`), one
   * still running in another process (`CALL_IN_FLIGHT`, with when to look again), one waiting for
   * approval (`APPROVAL_REQUIRED`, a repeat's too), a repeat waiting for the earlier call it repeats
   * to be settled (`TOOL_CALL_REPEAT`, `details.waiting`), or a call that did not come through the
   * wrapped model.
   * The model is not asked again.
   */
  get stopped(): OncelyError | undefined {
    return this.#stop;
  }

  /** The recorded model responses of the run, in order. */
  steps(): Promise<LoopStep[]> {
    return this.ledger.store.loopSteps.list(this.tenantId, this.runId);
  }

  /**
   * Runs the application's loop and throws why it stopped, even when the framework ended it itself.
   * It is a span, `oncely.run.drive`, in the run's own trace (`runTraceId(tenantId, runId)`): every
   * run of the loop under this `runId`, in whatever process, after whatever restart, lands in the
   * same trace, linked to the span that was active when it was called (a request's). The loop's model
   * calls (`chat <model>`) and tool calls (`execute_tool <tool>`) are spans under it.
   */
  async run<T>(loop: () => Promise<T>): Promise<T> {
    const parent = runTraceContext(this.tenantId, this.runId);
    const ended = await inSpan(
      'oncely.run.drive',
      {
        parent,
        links: activeSpanLinks(),
        attributes: () => ({
          'oncely.run.id': this.runId,
          'oncely.tenant.id': this.tenantId,
          'oncely.loop': this.framework,
          ...(this.conversationId === undefined ? {} : { 'oncely.conversation.id': this.conversationId }),
        }),
      },
      async (span) => {
        const outer = this.#runSpan;
        this.#runSpan = { context: contextOf(span, parent), traceId: span.spanContext().traceId };
        try {
          const value = await this.#runLoop(loop);
          if (span.isRecording()) span.setAttribute('oncely.drive.end', 'ended');
          return { stopped: false as const, value };
        } catch (error) {
          // A stop is the loop waiting (a call to settle, an approval), as a run waits: not a span error.
          if (error !== this.#stop || this.#stop === undefined) throw error;
          if (span.isRecording()) {
            span.setAttributes({ 'oncely.drive.end': 'stopped', 'oncely.reason': this.#stop.code });
          }
          return { stopped: true as const, stop: this.#stop };
        } finally {
          this.#runSpan = outer;
        }
      },
    );
    if (ended.stopped) throw ended.stop;
    return ended.value;
  }

  async #runLoop<T>(loop: () => Promise<T>): Promise<T> {
    let value: T;
    try {
      value = await loop();
    } catch (error) {
      throw this.#stop ?? error;
    }
    if (this.#stop !== undefined) throw this.#stop;
    return value;
  }

  /**
   * The parent of a model or tool span of the loop: the active context when it is inside the run's
   * trace (under `run()`'s span, or under a span the framework made there), else `run()`'s span
   * (a process without a context manager), else the active context (a loop not run through `run()`).
   */
  protected spanParent(): Context | undefined {
    const run = this.#runSpan;
    if (run === undefined || activeTraceId() === run.traceId) return undefined;
    return run.context;
  }

  /** Runs a model call of the loop in its span (`chat <model>`, a client span under `run()`'s). */
  protected inModelSpan<T>(facts: ModelCallFacts, call: (span: Span) => Promise<T>): Promise<T> {
    const parent = this.spanParent();
    return inSpan(modelSpanName(facts), this.#modelSpanOptions(facts, parent), call);
  }

  /** Starts a model call's span the caller ends (a streamed call's, ended with its stream). */
  protected startModelSpan(facts: ModelCallFacts): Span {
    return startSpan(modelSpanName(facts), this.#modelSpanOptions(facts, this.spanParent()));
  }

  #modelSpanOptions(facts: ModelCallFacts, parent: Context | undefined) {
    return {
      kind: SpanKind.CLIENT,
      ...(parent === undefined ? {} : { parent }),
      attributes: (): Attributes => ({
        'gen_ai.operation.name': 'chat',
        ...definedAttributes({
          'gen_ai.provider.name': facts.provider,
          'gen_ai.request.model': facts.model,
        }),
        'oncely.run.id': this.runId,
        'oncely.tenant.id': this.tenantId,
        ...(facts.step === undefined ? {} : { 'oncely.run.step': runStep(facts.step) }),
      }),
    };
  }

  /** Refuses a model call once the run stopped. */
  protected assertGoing(): void {
    if (this.#stop !== undefined) throw this.#stop;
  }

  /** The first reason to stop stands; every later one is returned to be thrown where it arose. */
  protected stopWith(error: OncelyError): OncelyError {
    this.#stop ??= error;
    return error;
  }

  /**
   * Runs one tool call of the loop under the ledger (`<runId>:<toolCallId>`, the run's repeat policy
   * and conversation). A call refused before it was reserved is told to the model when the model
   * can act on it: rejected at approval, or refused as a repeat (`repeat_refused`, the words a run
   * uses). A call that must wait stops the loop and throws: an approval to decide (`APPROVAL_REQUIRED`,
   * a repeat's naming the earlier call in `details.repeatOf`) or an earlier identical call whose
   * outcome is unknown (`TOOL_CALL_REPEAT`, `details.waiting`).
   */
  protected async guarded(
    tool: Tool,
    args: unknown,
    toolCallId: string,
    signal?: AbortSignal,
  ): Promise<LoopCall> {
    const call: ToolCallRequest = {
      tool,
      args,
      tenantId: this.tenantId,
      runId: this.runId,
      toolCallId,
      ...(this.conversationId === undefined ? {} : { conversationId: this.conversationId }),
    };
    return this.#inTurn(call, async () => {
      try {
        const traceContext = this.spanParent();
        const options = {
          ...(signal === undefined ? {} : { signal }),
          ...(this.onRepeat === undefined ? {} : { onRepeat: this.onRepeat }),
          ...(traceContext === undefined ? {} : { traceContext }),
        };
        const [outcome] = await executeToolCalls(this.ledger, [call], options);
        if (outcome === undefined) throw new Error('executeToolCalls returned no outcome for one call');
        return { outcome };
      } catch (error) {
        return { told: this.#toldOrStop(error) };
      }
    });
  }

  /** What the model hears of a call refused before it was reserved; throws (stopping the loop) otherwise. */
  #toldOrStop(error: unknown): HeardResult {
    if (isOncelyError(error, 'APPROVAL_REJECTED')) return heardRejected(error.message);
    const refused = heardOfRepeatRefusal(error);
    if (refused !== undefined) return refused;
    if (isOncelyError(error, 'APPROVAL_REQUIRED') || isOncelyError(error, 'TOOL_CALL_REPEAT')) {
      throw this.stopWith(error);
    }
    throw error;
  }

  /**
   * Runs a call after every earlier call of this process with the same repeat digest has settled.
   * A framework runs the calls of one model response at once, each through its own guarded call, so
   * two identical calls of one response would both find no earlier call and both go out; in turn,
   * the second finds the first's record and is a repeat of it. If the first stopped the loop (an
   * approval asked for, an unknown outcome), the second is not made: the loop's stop is thrown.
   * Calls under `allow`, reads, and calls whose arguments are refused anyway are not held.
   */
  async #inTurn(call: ToolCallRequest, run: () => Promise<LoopCall>): Promise<LoopCall> {
    const digest = this.#repeatDigest(call);
    if (digest === undefined) return run();
    const before = this.#turns.get(digest);
    const mine = (async () => {
      if (before !== undefined) {
        await before;
        this.assertGoing();
      }
      return run();
    })();
    const settled = mine.then(
      () => undefined,
      () => undefined,
    );
    this.#turns.set(digest, settled);
    try {
      return await mine;
    } finally {
      if (this.#turns.get(digest) === settled) this.#turns.delete(digest);
    }
  }

  #repeatDigest(call: ToolCallRequest): string | undefined {
    if ((this.onRepeat ?? call.tool.onRepeat ?? DEFAULT_REPEAT_POLICY) === 'allow') return undefined;
    try {
      return prepareCall(call).request.repeatDigest ?? undefined;
    } catch {
      return undefined; // the guarded call refuses it the same way, before anything is reserved
    }
  }

  /** A call id the wrapped model did not mint: refused, and the run stops. */
  protected notMinted(tool: Tool, callId: string | undefined, wrap: string): OncelyError {
    return this.stopWith(
      new OncelyError(
        'LOOP_CALL_NOT_MINTED',
        `tool call ${callId ?? '(no id)'} of "${tool.name}" did not come through ${wrap}: its id is the provider's, ` +
          `which a restart would not give again; give the model as ${wrap.replace('(...)', '(yourModel)')}`,
      ),
    );
  }

  /**
   * The stop on a call whose outcome this process cannot tell the model: `CALL_IN_FLIGHT` while its
   * last attempt may still land (the decision table said `wait`: another process's attempt, not
   * past its timeout plus the margin, or one of this process still out), with `details.retryAt` and
   * `details.retryAfterMs` saying when running again can know more (null while an attempt of this
   * process ignores its timeout: when its tool answers); else `RUN_CALL_UNKNOWN`: nobody knows, and
   * only a settlement (its reconcile hook, an operator) moves it.
   */
  protected unknownCall(outcome: ToolCallOutcome, tool: Tool): OncelyError {
    const key = outcome.record.idempotencyKey;
    const waiting = outcome.status === 'unknown' ? outcome.waiting : undefined;
    if (waiting !== undefined) return this.stopWith(this.#inFlight(key, tool, waiting));
    return this.stopWith(
      new OncelyError(
        'RUN_CALL_UNKNOWN',
        `tool call ${key} (${tool.name}) may or may not have taken effect; the run stopped and the model was not told. ` +
          `Settle it (its reconcile hook, or \`oncely executions resolve ${key} --status completed|failed --reason ...\`), then run again`,
        { details: { idempotencyKey: key, tool: tool.name, runId: this.runId, retryAt: null } },
      ),
    );
  }

  #inFlight(key: string, tool: Tool, waiting: { why: string; retryAt: string | null }): OncelyError {
    const { retryAt } = waiting;
    const retryAfterMs = retryAt === null ? null : Math.max(0, Date.parse(retryAt) - this.ledger.clock.now());
    const when =
      retryAt === null
        ? 'run again once its tool answers'
        : `run again after ${retryAt} (in ${retryAfterMs} ms): by then it has landed or can no longer land, and a call still unknown asks its reconcile hook`;
    return new OncelyError(
      'CALL_IN_FLIGHT',
      `tool call ${key} (${tool.name}) is still running (${waiting.why}); the run stopped and the model was not told. ` +
        `Nothing is wrong yet: ${when}. Settle it only if it is still unknown then`,
      { details: { idempotencyKey: key, tool: tool.name, runId: this.runId, retryAt, retryAfterMs } },
    );
  }
}

/** A loop step (from 0) as oncely's runs number their model calls: 1 for the first. */
function runStep(step: number): number {
  return step + 1;
}

function modelSpanName(facts: ModelCallFacts): string {
  return facts.model === undefined ? 'chat' : `chat ${facts.model}`;
}

/** A model call's answer as its span's attributes (set once the span records). */
export function answerAttributes(span: Span, answer: ModelCallAnswer): void {
  if (!span.isRecording()) return;
  span.setAttributes({
    ...definedAttributes({
      'gen_ai.response.model': answer.model,
      'gen_ai.usage.input_tokens': answer.inputTokens,
      'gen_ai.usage.output_tokens': answer.outputTokens,
    }),
    ...(answer.finishReason === undefined ? {} : { 'gen_ai.response.finish_reasons': [answer.finishReason] }),
    'oncely.model.tool_calls': answer.toolCalls,
    'oncely.model.replayed': answer.replayed,
    ...(answer.step === undefined ? {} : { 'oncely.run.step': runStep(answer.step) }),
  });
}
