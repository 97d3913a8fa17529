import type { Ledger, ToolCallOutcome } from '../calls/index.js';
import { OncelyError } from '../errors/index.js';
import type { LoopStep } from '../store/index.js';
import type { Tool } from '../tools/index.js';

/*
 * What a durable run of an application's own agent loop is, whichever framework drives it (the AI
 * SDK, OpenAI Agents JS): a run id and its recorded model responses, the call ids minted for them
 * (the only ones its tools run), and why it stopped, once it has.
 */

export interface LoopRunOptions {
  /** The ledger the calls are guarded by (`openLedger(url)`); its store keeps the model's responses too. */
  readonly ledger: Ledger;
  readonly tenantId: string;
  /** The same id after a restart continues the run; 1-200 characters, no `:` (keys are `<runId>:<callId>`). */
  readonly runId: string;
}

export abstract class LoopRun {
  readonly ledger: Ledger;
  readonly tenantId: string;
  readonly runId: string;
  /** The call ids of the responses this run recorded or replayed: the only ones its tools run. */
  protected readonly minted = new Set<string>();
  #stop: OncelyError | undefined;

  constructor(options: LoopRunOptions) {
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

  /**
   * Why the run stopped, once it has: a call nobody knows the outcome of (`RUN_CALL_UNKNOWN`), one
   * still running in another process (`CALL_IN_FLIGHT`, with when to look again), one waiting for
   * approval (`APPROVAL_REQUIRED`), or a call that did not come through the wrapped model.
   * The model is not asked again.
   */
  get stopped(): OncelyError | undefined {
    return this.#stop;
  }

  /** The recorded model responses of the run, in order. */
  steps(): Promise<LoopStep[]> {
    return this.ledger.store.loopSteps.list(this.tenantId, this.runId);
  }

  /** Runs the application's loop and throws why it stopped, even when the framework ended it itself. */
  async run<T>(loop: () => Promise<T>): Promise<T> {
    let value: T;
    try {
      value = await loop();
    } catch (error) {
      throw this.#stop ?? error;
    }
    if (this.#stop !== undefined) throw this.#stop;
    return value;
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
