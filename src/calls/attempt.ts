import { OncelyError, ToolNotAttemptedError, errorInfo } from '../errors/index.js';
import type { ErrorInfo } from '../ledger/index.js';
import { backoffDelay, type Effect, type ToolContext } from '../tools/index.js';
import type { Clock } from '../util/clock.js';

/** What one reservation's tries came to. */
export type AttemptOutcome =
  | { readonly kind: 'completed'; readonly value: unknown }
  | { readonly kind: 'failed'; readonly error: ErrorInfo }
  /** The request may have left; `late` settles when the abandoned execution finally does. */
  | { readonly kind: 'indeterminate'; readonly error: ErrorInfo; readonly late: Promise<LateOutcome> };

/** What an execution abandoned on timeout said in the end. */
export type LateOutcome =
  | { readonly kind: 'completed'; readonly value: unknown }
  | { readonly kind: 'failed'; readonly error: ErrorInfo }
  | { readonly kind: 'unknown' };

type TryResult =
  | { readonly kind: 'value'; readonly value: unknown }
  | { readonly kind: 'error'; readonly error: unknown }
  | { readonly kind: 'aborted'; readonly error: unknown; readonly execution: Promise<TryResult> };

export interface AttemptPlan {
  readonly effect: Effect;
  readonly timeoutMs: number;
  readonly context: Omit<ToolContext, 'signal' | 'retry'>;
  readonly signal?: AbortSignal | undefined;
  readonly run: (context: ToolContext) => unknown;
  /** Told of each try's execution as it starts; it settles when the tool answers, however late. */
  readonly onExecution?: (execution: Promise<unknown>) => void;
  /** The time of the timeout and of the backoff between a read's tries. */
  readonly clock: Clock;
  /** The jitter of that backoff, a number in [0, 1). */
  readonly random: () => number;
}

/**
 * Runs a tool under its effect's rules: a read is tried up to its attempts with backoff on a timeout
 * or error; anything else is tried once, and a timeout, an abort or an unexpected error is unknown.
 * `ToolNotAttemptedError` always means `failed`: nothing left the process.
 */
export async function runAttempts(plan: AttemptPlan): Promise<AttemptOutcome> {
  // A caller that has already given up (a driver whose lease is lost) sends nothing at all.
  if (plan.signal?.aborted === true) return notStarted(plan.signal.reason);
  for (let retry = 0; ; retry++) {
    const result = await tryOnce(plan, retry);
    if (result.kind === 'value') return { kind: 'completed', value: result.value };
    if (result.error instanceof ToolNotAttemptedError)
      return { kind: 'failed', error: errorInfo(result.error) };
    if (plan.effect.kind !== 'read') {
      const late =
        result.kind === 'aborted'
          ? result.execution.then(toLate)
          : Promise.resolve<LateOutcome>({ kind: 'unknown' });
      return { kind: 'indeterminate', error: errorInfo(result.error), late };
    }
    const callerGaveUp = gaveUp(plan.signal);
    if (retry + 1 >= plan.effect.attempts || callerGaveUp) {
      return {
        kind: 'failed',
        error: errorInfo(
          new OncelyError(
            'TOOL_EXECUTION_FAILED',
            `read failed after ${retry + 1} ${retry === 0 ? 'try' : 'tries'}: ${errorInfo(result.error).message}`,
          ),
        ),
      };
    }
    try {
      await plan.clock.sleep(backoffDelay(plan.effect, retry, plan.random), plan.signal);
    } catch {
      // The caller gave up while we waited; the next try sees the aborted signal and stops.
    }
  }
}

function gaveUp(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}

function notStarted(reason: unknown): AttemptOutcome {
  return {
    kind: 'failed',
    error: errorInfo(
      new ToolNotAttemptedError(
        `the attempt was not started: the caller gave up before anything was sent (${errorInfo(reason).message})`,
      ),
    ),
  };
}

async function tryOnce(plan: AttemptPlan, retry: number): Promise<TryResult> {
  const controller = new AbortController();
  // The timeout's error (and its stack) is built only when it fires.
  const timer = plan.clock.setTimeout(() => {
    controller.abort(
      new OncelyError('TOOL_TIMEOUT', `no answer within ${plan.timeoutMs} ms; the request may have left`),
    );
  }, plan.timeoutMs);
  const onCallerAbort = (): void =>
    controller.abort(plan.signal?.reason ?? new Error('aborted by the caller'));
  if (plan.signal?.aborted === true) onCallerAbort();
  plan.signal?.addEventListener('abort', onCallerAbort, { once: true });
  const execution: Promise<TryResult> = Promise.resolve()
    .then(() => plan.run({ ...plan.context, retry, signal: controller.signal }))
    .then(
      (value): TryResult => ({ kind: 'value', value }),
      (error: unknown): TryResult => ({ kind: 'error', error }),
    );
  plan.onExecution?.(execution);
  const aborted = new Promise<TryResult>((resolve) => {
    const onAbort = (): void => resolve({ kind: 'aborted', error: controller.signal.reason, execution });
    if (controller.signal.aborted) onAbort();
    else controller.signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    const first = await Promise.race([execution, aborted]);
    // A tool that threw because its signal was aborted is the abort itself: the outcome stays unknown.
    if (
      first.kind === 'error' &&
      controller.signal.aborted &&
      !(first.error instanceof ToolNotAttemptedError)
    ) {
      return { kind: 'aborted', error: controller.signal.reason, execution: Promise.resolve(first) };
    }
    return first;
  } finally {
    plan.clock.clearTimeout(timer);
    plan.signal?.removeEventListener('abort', onCallerAbort);
  }
}

function toLate(result: TryResult): LateOutcome {
  if (result.kind === 'value') return { kind: 'completed', value: result.value };
  if (result.kind === 'error' && result.error instanceof ToolNotAttemptedError) {
    return { kind: 'failed', error: errorInfo(result.error) };
  }
  return { kind: 'unknown' };
}
