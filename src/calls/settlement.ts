/*
 * Settlement, in one module: what a reconcile hook's answer does (raced against the tool's timeout,
 * validated, then the decision table's hook-answer rule), whether a started call's attempt may still
 * be running (an operator's resolve refuses it without force), and how a real outcome that
 * contradicts a settled record is made loud.
 */
import { OncelyError, errorInfo } from '../errors/index.js';
import {
  decideHookAnswer,
  landsUntil,
  toJsonValue,
  type JsonValue,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import type { TransitionResult } from '../store/index.js';
import type { ReconcileHook, Tool } from '../tools/index.js';
import type { Ledger } from './ledger.js';
import type { Clock, ClockTimer } from '../util/clock.js';

const RECONCILE_ACTOR = 'hook';

/** A read changed nothing, so a read that was in flight when its process died may simply run again. */
const readHasNoEffect: ReconcileHook = () => ({
  status: 'failed',
  reason: 'a read has no side effect; it is safe to run again',
});

export function reconcileHookOf(tool: Tool): ReconcileHook | undefined {
  return tool.reconcile ?? (tool.effect.kind === 'read' ? readHasNoEffect : undefined);
}

/** A hook's answer, validated: what it says, in values the ledger can store. */
type Answer =
  | {
      readonly status: 'completed';
      readonly value: JsonValue | null;
      readonly resultReference: string | null;
    }
  | { readonly status: 'failed'; readonly reason: string | null }
  | { readonly status: 'unknown'; readonly reason: string };

export interface ReconcileOptions {
  readonly signal?: AbortSignal | undefined;
}

/**
 * Asks the tool's reconcile hook what became of an unknown call and records the answer,
 * compare-and-set, as the decision table says: `completed` settles it; `failed` settles it only once
 * its last attempt can no longer land and the key may still be tried again (else a note); `unknown`,
 * a hook that throws, that does not answer within the tool's timeout, or that answers something the
 * ledger cannot store leaves it unknown with a note in the history. Never throws for the hook's sake.
 * Returns the record as it now stands.
 */
export async function reconcileRecord(
  ledger: Ledger,
  tool: Tool,
  hook: ReconcileHook,
  record: ToolExecutionRecord,
  options: ReconcileOptions = {},
): Promise<ToolExecutionRecord> {
  const answer = await askHook(ledger.clock, hook, record, tool, options.signal);
  const actor = { kind: 'reconcile' as const, id: `${RECONCILE_ACTOR}:${tool.name}` };
  const where = { tenantId: record.tenantId, idempotencyKey: record.idempotencyKey };
  const mayLand = ledger.mayLand(record);
  const decided = decideHookAnswer(answer.status, {
    mayLand,
    attemptsExhausted: ledger.attemptsExhausted(record),
  });
  if (decided.action === 'note') {
    const reason =
      answer.status === 'unknown'
        ? answer.reason
        : `${(answer.status === 'failed' ? answer.reason : null) ?? 'no effect found'}; ${decided.why}`;
    await ledger.store.ledger.note({
      ...where,
      actor,
      reason,
      detail: { answer: answer.status },
    });
    return (await ledger.store.ledger.get(record.tenantId, record.idempotencyKey)) ?? record;
  }
  const base = {
    ...where,
    via: 'reconcile' as const,
    expect: { status: record.status, version: record.version },
    actor,
    attempt: record.attempt,
    keyed: tool.downstreamAcceptsKey,
    recordIgnored: true,
  };
  const written =
    answer.status === 'completed'
      ? await ledger.store.ledger.transition({
          ...base,
          to: 'completed',
          reason: decided.why,
          result: answer.value,
          resultReference: answer.resultReference,
        })
      : await ledger.store.ledger.transition({
          ...base,
          to: 'failed',
          reason: (answer.status === 'failed' ? answer.reason : null) ?? decided.why,
          error: {
            code: 'RECONCILED_NOT_TAKEN',
            message: (answer.status === 'failed' ? answer.reason : null) ?? 'did not take effect',
          },
        });
  reportLoss(ledger, written, `the reconcile hook found it ${answer.status}`, record.attempt);
  return written.record ?? record;
}

/**
 * Asks the hook, raced against the tool's timeout: a hook that never answers counts as `unknown`, and
 * the caller moves on (its promise is left to settle on its own). Its signal is aborted either way.
 */
async function askHook(
  clock: Clock,
  hook: ReconcileHook,
  record: ToolExecutionRecord,
  tool: Tool,
  signal?: AbortSignal,
): Promise<Answer> {
  const controller = new AbortController();
  let timer: ClockTimer | undefined;
  const timedOut = new Promise<Answer>((resolve) => {
    timer = clock.setTimeout(() => {
      const reason = `reconcile hook did not answer within ${tool.timeoutMs} ms`;
      controller.abort(new OncelyError('TOOL_TIMEOUT', reason));
      resolve({ status: 'unknown', reason });
    }, tool.timeoutMs);
  });
  const onAbort = (): void => controller.abort(signal?.reason);
  if (signal?.aborted === true) onAbort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  const asked = Promise.resolve()
    .then(() =>
      hook(record, {
        idempotencyKey: record.idempotencyKey,
        runId: record.runId,
        toolCallId: record.toolCallId,
        tenantId: record.tenantId,
        attempt: record.attempt,
        retry: 0,
        signal: controller.signal,
      }),
    )
    .then(validAnswer, (error: unknown): Answer => ({
      status: 'unknown',
      reason: `reconcile hook failed: ${errorInfo(error).message}`,
    }));
  try {
    return await Promise.race([asked, timedOut]);
  } finally {
    clock.clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

/** A hook's answer as the ledger can store it; anything else is the hook's error, recorded as unknown. */
function validAnswer(outcome: unknown): Answer {
  try {
    const o = outcome as {
      status?: unknown;
      value?: unknown;
      resultReference?: unknown;
      reason?: unknown;
    } | null;
    const status = o?.status;
    const reason = typeof o?.reason === 'string' && o.reason.trim() !== '' ? o.reason : null;
    if (status === 'failed') return { status, reason };
    if (status === 'unknown') return { status, reason: reason ?? 'reconcile hook could not tell' };
    if (status === 'completed') {
      const ref = o?.resultReference;
      if (ref !== undefined && ref !== null && typeof ref !== 'string') {
        return invalid(`a resultReference that is not a string (${typeof ref})`);
      }
      return {
        status,
        value: o?.value === undefined ? null : toJsonValue(o.value),
        resultReference: typeof ref === 'string' ? ref : null,
      };
    }
    return invalid(`${describe(outcome)}, not a status`);
  } catch (error) {
    return invalid(`a value the ledger cannot store: ${errorInfo(error).message}`);
  }
}

function invalid(what: string): Answer {
  return { status: 'unknown', reason: `reconcile hook returned ${what}` };
}

function describe(value: unknown): string {
  try {
    return JSON.stringify(value) ?? 'nothing';
  } catch {
    return 'a value that is not JSON';
  }
}

/**
 * Why a `started` call's attempt may still be running, or undefined when it can no longer land: an
 * attempt of this process still out, a live lease on its run (not for a compensation, which no run
 * drives), or an attempt younger than its timeout plus the margin.
 */
export async function stillRunning(ledger: Ledger, record: ToolExecutionRecord): Promise<string | undefined> {
  if (ledger.attemptInFlight(record.tenantId, record.idempotencyKey)) {
    return 'its attempt is still running in this process';
  }
  if (record.compensationOf === null) {
    const run = await ledger.store.runs.summary(record.tenantId, record.runId);
    const live =
      run?.status === 'running' &&
      run.leaseExpiresAt !== null &&
      Date.parse(run.leaseExpiresAt) > ledger.clock.now();
    if (live) return `run ${record.runId} is held by a live driver (${run.leaseOwner ?? 'unknown'})`;
  }
  if (ledger.mayLand(record)) {
    return `its attempt started at ${record.attemptStartedAt} and may run for ${record.attemptTimeoutMs ?? 0} ms (plus ${ledger.landingMarginMs} ms)`;
  }
  return undefined;
}

/**
 * Why an unknown call's request may still land (its attempt timed out or lost its answer less than
 * its timeout plus the margin ago), or undefined when it can no longer: what a `failed` settlement
 * must wait for, since the downstream's books may not show the request yet.
 */
export function mayStillLand(ledger: Ledger, record: ToolExecutionRecord): string | undefined {
  if (!ledger.mayLand(record)) return undefined;
  const until = new Date(landsUntil(record, ledger.landingMarginMs)).toISOString();
  return `its request (attempt started at ${record.attemptStartedAt}) may still land until ${until}`;
}

/** An outcome that lost its compare-and-set and contradicted the record: log it at error level. */
export function reportLoss(ledger: Ledger, result: TransitionResult, what: string, attempt: number): void {
  if (result.applied || result.conflict !== true) return;
  ledger.reportConflict(result.record, what, attempt);
}
