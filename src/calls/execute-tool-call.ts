import { crashPoint } from '../crash/index.js';
import type { ToolExecutionRecord } from '../ledger/index.js';
import type { ReserveRequest, ReserveResult, TransitionResult } from '../store/index.js';
import type { Tool } from '../tools/index.js';
import { runAttempts, type AttemptOutcome } from './attempt.js';
import type { Ledger } from './ledger.js';
import { outcomeOfRecord, type ToolCallOutcome } from './outcome.js';
import {
  assertBatch,
  assertSameCall,
  prepareCall,
  type CallIdentity,
  type PreparedCall,
  type ToolCallRequest,
} from './prepare.js';
import { reconcileHookOf, reconcileRecord } from './reconcile.js';
import { keepListening, recordOutcome, vanished, type RecordPlan } from './record-outcome.js';

export interface CallOptions {
  /** Aborting it aborts the tool's signal; a write in flight then becomes unknown, never failed. */
  readonly signal?: AbortSignal;
  /**
   * Ask the reconcile hook about a `started` call too, not only an `indeterminate` one. Set it only
   * when you know the process that reserved it is gone (a run's recovery does), or the hook may look
   * while the call is still in flight.
   */
  readonly reconcileStarted?: boolean;
}

/** How a caller reserves: the ledger's own `reserve`, or one fenced by a run's lease. */
export type Reserve = (requests: readonly ReserveRequest[]) => Promise<ReserveResult[]>;

/**
 * Where a call stands before anything is written for it: settled by the ledger (a replay, a reconcile
 * hook), or executed now with its outcome still to record.
 */
export type CallProgress =
  | { readonly kind: 'settled'; readonly outcome: ToolCallOutcome }
  | {
      readonly kind: 'executed';
      readonly call: PreparedCall;
      readonly record: ToolExecutionRecord;
      readonly attempt: AttemptOutcome;
    };

/** Times a call may go round reserve → reconcile `failed` → reserve again before we stop. */
const MAX_ROUNDS = 3;

/**
 * Runs one tool call once: reserves its key in the ledger, then runs the tool only if the ledger says
 * so. A completed key returns its recorded result without calling the tool; an unknown key is asked
 * of the reconcile hook (if any) and otherwise reported unknown; a failed key runs again, same key.
 *
 * @example
 * const outcome = await executeToolCall(ledger, issueCredit, { accountId: 'acct_1', amountCents: 2500 },
 *   { runId: 'run_1', toolCallId: 'call_1', tenantId: 'acme' });
 * if (outcome.status === 'unknown') console.log('settle it:', outcome.record.idempotencyKey);
 */
export async function executeToolCall(
  ledger: Ledger,
  tool: Tool,
  args: unknown,
  call: CallIdentity,
  options: CallOptions = {},
): Promise<ToolCallOutcome> {
  const [outcome] = await executeToolCalls(ledger, [{ ...call, tool, args }], options);
  if (outcome === undefined) throw new Error('executeToolCalls returned no outcome for one call');
  return outcome;
}

/**
 * Runs the calls of one model response: all are validated first (a bad one writes nothing), reserved
 * together in one statement, then run in parallel as the ledger allows. Outcomes come back in order.
 */
export async function executeToolCalls(
  ledger: Ledger,
  calls: readonly ToolCallRequest[],
  options: CallOptions = {},
): Promise<ToolCallOutcome[]> {
  const prepared = calls.map(prepareCall);
  assertBatch(prepared);
  if (prepared.length === 0) return [];
  const reserve: Reserve = (requests) => ledger.store.ledger.reserve(requests, ledger.actor);
  const reservations = await reserve(prepared.map((p) => p.request));
  return Promise.all(
    prepared.map(async (call, i) => {
      const progress = await proceedCall(ledger, call, reservations[i], { ...options, reserve });
      return progress.kind === 'settled' ? progress.outcome : finishExecuted(ledger, progress);
    }),
  );
}

/**
 * Takes one reserved call as far as it goes without writing its outcome: a reservation this caller
 * holds is executed; someone else's record is replayed, or asked of the reconcile hook when unknown
 * (a hook's `failed` re-reserves the key and runs it again, same key).
 */
export async function proceedCall(
  ledger: Ledger,
  call: PreparedCall,
  reservation: ReserveResult | undefined,
  options: CallOptions & { readonly reserve: Reserve },
  round = 1,
): Promise<CallProgress> {
  if (reservation === undefined)
    throw new Error(`no reservation came back for ${call.request.idempotencyKey}`);
  if (reservation.kind === 'reserved') {
    const attempt = await runReserved(call, reservation.record, options.signal);
    return { kind: 'executed', call, record: reservation.record, attempt };
  }
  const record = reservation.record;
  assertSameCall(call, record);
  const settled = (outcome: ToolCallOutcome): CallProgress => ({ kind: 'settled', outcome });
  if (record.status !== 'started' && record.status !== 'indeterminate')
    return settled(outcomeOfRecord(record));
  const hook = reconcileHookOf(call.tool);
  const mayAsk = record.status === 'indeterminate' || options.reconcileStarted === true;
  if (hook === undefined || !mayAsk || round > MAX_ROUNDS) return settled(outcomeOfRecord(record));
  const found = await reconcileRecord(ledger, call.tool, hook, record, options.signal);
  if (found.status === 'completed') return settled(outcomeOfRecord(found, 'reconcile'));
  if (found.status !== 'failed') return settled(outcomeOfRecord(found));
  // Definitely not taken effect: eligible to run again, with the same key.
  const [again] = await options.reserve([call.request]);
  return proceedCall(ledger, call, again, options, round + 1);
}

/** Runs the tool of a reservation this caller holds, under its effect's retry rules. */
async function runReserved(
  call: PreparedCall,
  record: ToolExecutionRecord,
  signal: AbortSignal | undefined,
): Promise<AttemptOutcome> {
  await crashPoint('tool.after-reserve');
  const { tool } = call;
  const outcome = await runAttempts({
    effect: tool.effect,
    timeoutMs: tool.timeoutMs,
    signal,
    context: {
      idempotencyKey: record.idempotencyKey,
      runId: record.runId,
      toolCallId: record.toolCallId,
      tenantId: record.tenantId,
      attempt: record.attempt,
    },
    run: async (context) => {
      await crashPoint('tool.before-execute');
      return tool.execute(call.args, context);
    },
  });
  if (outcome.kind === 'completed') await crashPoint('tool.after-effect');
  return outcome;
}

export function recordPlanOf(
  ledger: Ledger,
  progress: Extract<CallProgress, { kind: 'executed' }>,
): RecordPlan {
  const { tool } = progress.call;
  return { ledger, record: progress.record, resultReference: (v) => tool.resultReference?.(v) };
}

/** Records an executed call's outcome on its own and says what it came to. */
async function finishExecuted(
  ledger: Ledger,
  progress: Extract<CallProgress, { kind: 'executed' }>,
): Promise<ToolCallOutcome> {
  const written = await recordOutcome(recordPlanOf(ledger, progress), progress.attempt);
  await crashPoint('tool.after-record');
  return executedOutcome(progress, written);
}

/**
 * What an executed call came to once its outcome transition was written (by `recordOutcome`, or in a
 * caller's transaction, after which it calls `afterWrite`).
 */
export function executedOutcome(
  progress: Extract<CallProgress, { kind: 'executed' }>,
  written: ToolExecutionRecord,
): ToolCallOutcome {
  const { attempt, record } = progress;
  if (
    attempt.kind === 'completed' &&
    written.status === 'completed' &&
    written.version === record.version + 1
  ) {
    return {
      status: 'completed',
      value: attempt.value,
      resultReference: written.resultReference,
      source: 'executed',
      replayed: false,
      record: written,
    };
  }
  return outcomeOfRecord(written);
}

/** After a caller's transaction wrote an executed call's outcome: keep listening for a late answer. */
export function afterWrite(
  ledger: Ledger,
  progress: Extract<CallProgress, { kind: 'executed' }>,
  written: TransitionResult,
): ToolExecutionRecord {
  keepListening(recordPlanOf(ledger, progress), progress.attempt, written);
  if (written.record === undefined) throw vanished(progress.record);
  return written.record;
}
