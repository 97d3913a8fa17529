import { setMaxListeners } from 'node:events';
import { crashPoint, unsafeSwitch } from '../crash/index.js';
import { landsUntil, type RepeatPolicy, type ToolExecutionRecord } from '../ledger/index.js';
import type { ReserveRequest, ReserveResult, TransitionRequest, TransitionResult } from '../store/index.js';
import {
  NOT_GATED,
  approvalsToConsume,
  assertReopenRepeatsNothing,
  consumeApproval,
  inlineRepeatScope,
} from './approvals.js';
import type { Tool } from '../tools/index.js';
import { runAttempts, type AttemptOutcome } from './attempt.js';
import type { CallProgress } from './call-progress.js';
import type { Ledger } from './ledger.js';
import { inToolSlots } from './tool-slots.js';
import { recheckWindowed, RepeatRaced, type WindowedCall } from './repeats.js';
import { OncelyError } from '../errors/index.js';
import { outcomeOfRecord, type ToolCallOutcome } from './outcome.js';
import {
  assertBatch,
  assertSameCall,
  prepareCall,
  type CallIdentity,
  type PreparedCall,
  type ToolCallRequest,
} from './prepare.js';
import {
  keepListening,
  outcomeTransition,
  recordOutcome,
  reported,
  vanished,
  type RecordPlan,
} from './record-outcome.js';
import { reconcileHookOf, reconcileRecord, reportLoss } from './settlement.js';
import { definedAttributes, inSpan, type Attributes, type Context } from '../tracing/index.js';

/** Test-only (src/crash/unsafe.ts), read once: replay a started call as if there were no ledger. */
const NO_LEDGER = unsafeSwitch('no-ledger');

export interface CallOptions {
  /** Aborting it aborts the tool's signal; a write in flight then becomes unknown, never failed. */
  readonly signal?: AbortSignal;
  /** The lease epoch of the run's driver, given to the tool as `ctx.fencingToken`. */
  readonly fencingToken?: number;
  /**
   * What happens to a call that repeats an earlier call of its conversation (or run) that took
   * effect or may have: default the tool's own `onRepeat`, else `ask`.
   */
  readonly onRepeat?: RepeatPolicy;
  /** The parent of the call's span (a run's drive, a durable loop's run); the active context when not given. */
  readonly traceContext?: Context;
}

/** How a caller reserves: the ledger's own `reserve`, or one fenced by a run's lease. */
export type Reserve = (requests: readonly ReserveRequest[]) => Promise<ReserveResult[]>;

/** Times a call may go round ask the hook → re-open → reserve before we stop and call it unknown. */
const MAX_ROUNDS = 4;

/**
 * Runs one tool call once: reserves its key in the ledger, then runs the tool only if the ledger says
 * so. A completed key returns its recorded result without calling the tool; an unknown key is asked
 * of the reconcile hook (if any) and otherwise reported unknown; a failed key runs again, same key,
 * once its last attempt can no longer land. A tool that needs approval runs only once an operator
 * approved these exact arguments (`APPROVAL_REQUIRED` until then; the approval is asked for).
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
  // One call that needs no approval has its repeat check made by its reservation itself (one
  // statement instead of a read and then the reservation); the gate runs only if that finds a repeat.
  const inline = inlineRepeatScope(prepared, options.onRepeat);
  let gated = inline === undefined ? await approvalsToConsume(ledger, prepared, options.onRepeat) : NOT_GATED;
  const reserve: Reserve = (requests) => ledger.store.ledger.reserve(requests, ledger.actor);
  const { signal, release } = batchSignal(options.signal, prepared.length);
  const settled = new Array<PromiseSettledResult<CallProgress>>(prepared.length);
  const index = new Map(prepared.map((call, i) => [call, i]));
  let ran = 0;
  // Calls of a tool with a cluster-wide limit wait for a slot before they are reserved (in waves).
  const reserveWave = async (
    wave: readonly PreparedCall[],
  ): Promise<Map<PreparedCall, CallProgress | undefined>> => {
    const [only] = wave;
    if (inline !== undefined && only !== undefined) {
      const reserved = await ledger.store.ledger.reserveUnlessRepeat(only.request, inline, ledger.actor);
      // An earlier identical call stands (or this key was reserved just now by another caller): the
      // gate decides as it does for every call, reading both again.
      if (reserved.kind === 'repeated') gated = await approvalsToConsume(ledger, prepared, options.onRepeat);
      else return answerWave(wave, [reserved]);
    }
    const consume = gated.consume.filter((c) => wave.includes(c));
    const keys = new Set(wave.map((p) => p.request.idempotencyKey));
    const recheck = gated.windowed.filter((w) => keys.has(w.request.idempotencyKey));
    const reservations =
      consume.length === 0 && recheck.length === 0
        ? await reserve(wave.map((p) => p.request))
        : await reserveChecked(ledger, wave, consume, recheck).catch(async (error: unknown) => {
            if (!(error instanceof RepeatRaced)) throw error;
            // Another caller reserved the same effect meanwhile: the gate now says what it is.
            await approvalsToConsume(ledger, prepared, options.onRepeat);
            throw raceError(error);
          });
    return answerWave(wave, reservations);
  };
  const answerWave = async (
    wave: readonly PreparedCall[],
    reservations: readonly ReserveResult[],
  ): Promise<Map<PreparedCall, CallProgress | undefined>> => {
    const results = await Promise.allSettled(
      wave.map((call, i) =>
        proceedCall(ledger, call, reservations[i], {
          ...options,
          ...(signal === undefined ? {} : { signal }),
          reserve,
          caller: 'guarded',
        }),
      ),
    );
    ran += wave.length;
    if (ran < prepared.length) await recordWave(ledger, results);
    const answers = new Map<PreparedCall, CallProgress | undefined>();
    wave.forEach((call, i) => {
      const result = results[i]!;
      settled[index.get(call)!] = result;
      answers.set(call, result.status === 'fulfilled' ? result.value : undefined);
    });
    return answers;
  };
  const slotted = inToolSlots(ledger, prepared, signal, reserveWave);
  // Waiting for a slot may end the batch (an abort, a store error) after earlier waves ran: what
  // those calls came to is still recorded first, or a call that completed would stay `started`.
  const stopped = await slotted.then(
    () => undefined,
    (error: unknown) => ({ reason: error }),
  );
  release();
  // Every call run has finished; their outcomes are recorded together before an error is thrown.
  const progress = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const written = await recordExecuted(
    ledger,
    progress.filter((p): p is Executed => p.kind === 'executed'),
  );
  if (stopped !== undefined) throw stopped.reason;
  const failure = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failure !== undefined) throw failure.reason;
  return progress.map((p) => (p.kind === 'settled' ? p.outcome : executedOutcome(p, written.get(p)!)));
}

type Executed = Extract<CallProgress, { kind: 'executed' }>;

/**
 * Reserves a wave in one transaction: its approvals consumed, and its calls that repeat nothing
 * under a tenant-wide window checked again under a lock (`RepeatRaced` when another caller reserved
 * the same effect since the gate). A call whose key has a record is a replay, never checked.
 */
async function reserveChecked(
  ledger: Ledger,
  wave: readonly PreparedCall[],
  consume: readonly PreparedCall[],
  windowed: readonly WindowedCall[],
): Promise<ReserveResult[]> {
  return ledger.store.transaction(async (tx) => {
    for (const call of consume) await consumeApproval(tx, call);
    if (windowed.length > 0) {
      const recorded = new Set(
        (await tx.ledger.getMany(windowed.map((w) => w.request))).map((r) => r.idempotencyKey),
      );
      const fresh = windowed.filter((w) => !recorded.has(w.request.idempotencyKey));
      const batch = new Set(wave.map((p) => p.request.idempotencyKey));
      await recheckWindowed(tx.ledger, ledger.clock.now(), fresh, batch);
    }
    return tx.ledger.reserve(
      wave.map((p) => p.request),
      ledger.actor,
    );
  });
}

/** A race the gate no longer sees (the earlier call since found not to have taken effect): ask again. */
function raceError(raced: RepeatRaced): OncelyError {
  const keys = raced.earlier.map((r) => r.idempotencyKey);
  return new OncelyError(
    'TOOL_CALL_REPEAT',
    `an identical call (${keys.join(', ')}) was reserved by another caller while this one was being made; ` +
      'nothing was reserved or run. Make the same call again: it is then treated by what that call came to',
    { details: { repeatOf: keys[0] ?? null, waiting: true, earlier: null } },
  );
}

/**
 * Records the outcomes of a wave that later waves follow, at once, in place: its calls become
 * `settled`. Kept for the end of the step, they would wait while a later wave waits for a slot —
 * past their attempts' deadlines, when another process may already have asked the hook or an
 * operator settled them, and a late `indeterminate` on a settled call reads as a conflict. Every
 * outcome of a step with one wave is still recorded with the step, in one write.
 */
export async function recordWave(
  ledger: Ledger,
  results: PromiseSettledResult<CallProgress>[],
): Promise<void> {
  const executed = results.flatMap((r) =>
    r.status === 'fulfilled' && r.value.kind === 'executed' ? [r.value] : [],
  );
  const written = await recordExecuted(ledger, executed);
  results.forEach((r, i) => {
    if (r.status !== 'fulfilled' || r.value.kind !== 'executed') return;
    const progress = r.value;
    results[i] = {
      status: 'fulfilled',
      value: { kind: 'settled', outcome: executedOutcome(progress, written.get(progress)!) },
    };
  });
}

/**
 * The caller's signal, for a batch: past 10 calls, one signal of ours that follows it, so the calls'
 * listeners do not trip Node's listener-leak warning on the caller's own signal.
 */
function batchSignal(
  signal: AbortSignal | undefined,
  calls: number,
): { signal: AbortSignal | undefined; release: () => void } {
  if (signal === undefined || calls <= 10) return { signal, release: () => undefined };
  const ours = new AbortController();
  setMaxListeners(0, ours.signal);
  const follow = (): void => ours.abort(signal.reason);
  if (signal.aborted) follow();
  else signal.addEventListener('abort', follow, { once: true });
  return { signal: ours.signal, release: () => signal.removeEventListener('abort', follow) };
}

/**
 * Records the outcomes of the calls a batch executed: one on its own, several in one write (one
 * statement and one commit for the step, whatever its size). If that transaction fails, each is recorded on its
 * own: what the calls came to is the truth, and left `started` a completed call would look unknown.
 */
async function recordExecuted(
  ledger: Ledger,
  executed: readonly Executed[],
): Promise<Map<Executed, ToolExecutionRecord>> {
  const records = new Map<Executed, ToolExecutionRecord>();
  if (executed.length === 0) return records;
  const one = async (p: Executed): Promise<void> => {
    records.set(p, await recordOutcome(recordPlanOf(ledger, p), p.attempt));
  };
  if (executed.length === 1) {
    await one(executed[0]!);
    await crashPoint('tool.after-record');
    return records;
  }
  let writes: [Executed, TransitionResult][];
  try {
    const written = await ledger.store.ledger.transitions(executed.map((p) => executedTransition(ledger, p)));
    writes = executed.map((p, i): [Executed, TransitionResult] => [p, written[i]!]);
  } catch {
    for (const p of executed) await one(p);
    await crashPoint('tool.after-record');
    return records;
  }
  for (const [p, written] of writes) records.set(p, afterWrite(ledger, p, written));
  await crashPoint('tool.after-record');
  return records;
}

export interface ProceedOptions extends CallOptions {
  readonly reserve: Reserve;
  /** The run loop tells the model what an operator decided; a guarded call runs a failed key again. */
  readonly caller: 'run' | 'guarded';
}

/**
 * Takes one reserved call as far as it goes without writing its outcome, as the decision table says:
 * a reservation this caller holds is executed; an existing record is replayed, told, asked of the
 * reconcile hook, waited for (its last attempt may still land), or re-opened and executed again.
 */
export function proceedCall(
  ledger: Ledger,
  call: PreparedCall,
  reservation: ReserveResult | undefined,
  options: ProceedOptions,
): Promise<CallProgress> {
  const { request, tool } = call;
  return inSpan(
    `execute_tool ${tool.name}`,
    {
      ...(options.traceContext === undefined ? {} : { parent: options.traceContext }),
      attributes: () => ({
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': tool.name,
        'gen_ai.tool.call.id': request.toolCallId,
        'oncely.idempotency_key': request.idempotencyKey,
        'oncely.effect': tool.effect.kind,
        'oncely.run.id': request.runId,
        'oncely.tenant.id': request.tenantId,
        ...(reservation === undefined ? {} : { 'oncely.reservation': reservation.kind }),
      }),
    },
    async (span) => {
      const progress = await proceed(ledger, call, reservation, options);
      if (span.isRecording()) span.setAttributes(progressAttributes(progress));
      return progress;
    },
  );
}

/**
 * Where a call left proceeding, as its span's attributes: the status it stands at or is recorded
 * with (an executed attempt's outcome is written with the step's next checkpoint), its attempt, and
 * who settled it.
 */
function progressAttributes(progress: CallProgress): Attributes {
  if (progress.kind === 'executed') {
    return {
      'oncely.ledger.status': progress.attempt.kind,
      'oncely.attempt': progress.record.attempt,
      'oncely.executed': true,
    };
  }
  const { outcome } = progress;
  return definedAttributes({
    'oncely.ledger.status': outcome.record.status,
    'oncely.attempt': outcome.record.attempt,
    'oncely.settled_by': outcome.record.settledBy?.kind,
    'oncely.executed': false,
    'oncely.outcome': outcome.status,
  });
}

async function proceed(
  ledger: Ledger,
  call: PreparedCall,
  reservation: ReserveResult | undefined,
  options: ProceedOptions,
  round = 1,
  asked = false,
): Promise<CallProgress> {
  if (reservation === undefined)
    throw new Error(`no reservation came back for ${call.request.idempotencyKey}`);
  if (reservation.kind === 'reserved') {
    const attempt = await runReserved(ledger, call, reservation.record, options);
    return { kind: 'executed', call, record: reservation.record, attempt };
  }
  const record = reservation.record;
  assertSameCall(call, record);
  if (NO_LEDGER && record.status === 'started') {
    // Test-only (src/crash/unsafe.ts): what a runtime without a ledger does on replay.
    const attempt = await runReserved(ledger, call, record, options);
    return { kind: 'executed', call, record, attempt };
  }
  const hook = reconcileHookOf(call.tool);
  const decision = ledger.decide(record, options.caller, hook !== undefined);
  const { mayLand } = decision;
  const settled = (outcome: ToolCallOutcome): CallProgress => ({ kind: 'settled', outcome });
  const again = (next: ToolExecutionRecord): Promise<CallProgress> =>
    proceed(ledger, call, { kind: 'existing', record: next }, options, round + 1, asked);
  switch (decision.action) {
    case 'replay':
      return settled(outcomeOfRecord(record, asked ? 'reconcile' : 'ledger'));
    case 'tell':
    case 'unknown':
      return settled(outcomeOfRecord(record));
    case 'wait':
      return settled(waitingOutcome(ledger, record, decision.why));
    case 'ask_hook': {
      if (hook === undefined || round > MAX_ROUNDS) return settled(outcomeOfRecord(record));
      const found = await reconcileRecord(ledger, call.tool, hook, record, { signal: options.signal });
      if (found.version === record.version) {
        return settled(
          mayLand
            ? waitingOutcome(
                ledger,
                found,
                'the hook could not settle it, and its last attempt may still land',
              )
            : outcomeOfRecord(found),
        );
      }
      return proceed(ledger, call, { kind: 'existing', record: found }, options, round + 1, true);
    }
    case 'reopen': {
      if (round > MAX_ROUNDS) return settled(outcomeOfRecord(record));
      // The run loop checked its calls' repeats as it planned the step (plan-step.ts).
      if (options.caller === 'guarded') await assertReopenRepeatsNothing(ledger, call, options.onRepeat);
      const [reopened] = await options.reserve([{ ...call.request, reopenVersion: record.version }]);
      if (reopened?.kind === 'existing' && reopened.record.version === record.version) {
        return settled(outcomeOfRecord(reopened.record));
      }
      if (reopened?.kind === 'existing') return again(reopened.record);
      return proceed(ledger, call, reopened, options, round + 1, asked);
    }
    case 'reserve':
    case 'request_approval':
    case 'await_approval':
    case 'rejected':
    case 'await_earlier':
    case 'refuse_repeat':
      throw new Error(`decision "${decision.action}" for ${record.idempotencyKey}, which has a record`);
  }
}

/**
 * An unknown outcome that says why nothing ran, and when to look again: once the attempt's timeout
 * (plus the margin) has passed, by when an attempt of this process has been aborted too. Null when
 * that time has passed and an attempt of this process is still running (its tool ignores its
 * signal): nobody can say when it ends.
 */
function waitingOutcome(ledger: Ledger, record: ToolExecutionRecord, why: string): ToolCallOutcome {
  const here = ledger.attemptInFlight(record.tenantId, record.idempotencyKey);
  const until = landsUntil(record, ledger.landingMarginMs);
  const known = !here || until > ledger.clock.now();
  return {
    status: 'unknown',
    record,
    waiting: { why, retryAt: known ? new Date(until).toISOString() : null },
  };
}

/** Runs the tool of a reservation this caller holds, under its effect's retry rules. */
async function runReserved(
  ledger: Ledger,
  call: PreparedCall,
  record: ToolExecutionRecord,
  { signal, fencingToken }: CallOptions,
): Promise<AttemptOutcome> {
  await crashPoint('tool.after-reserve');
  const { tool } = call;
  const outcome = await runAttempts({
    effect: tool.effect,
    timeoutMs: tool.timeoutMs,
    clock: ledger.clock,
    random: ledger.random,
    signal,
    onExecution: (execution) => ledger.holdAttempt(record.tenantId, record.idempotencyKey, execution),
    context: {
      idempotencyKey: record.idempotencyKey,
      runId: record.runId,
      toolCallId: record.toolCallId,
      tenantId: record.tenantId,
      attempt: record.attempt,
      ...(fencingToken === undefined ? {} : { fencingToken }),
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
  return {
    ledger,
    record: progress.record,
    resultReference: (v) => tool.resultReference?.(v),
    keyed: tool.downstreamAcceptsKey,
  };
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

/** The compare-and-set that records an executed call's outcome, for a caller's own transaction. */
export function executedTransition(
  ledger: Ledger,
  progress: Extract<CallProgress, { kind: 'executed' }>,
): TransitionRequest {
  const { resultReference, keyed } = recordPlanOf(ledger, progress);
  return outcomeTransition(ledger.actor, progress.record, progress.attempt, resultReference, keyed);
}

/**
 * After a caller's transaction wrote an executed call's outcome (`executedTransition`) and committed:
 * a lost compare-and-set is reported, and an indeterminate attempt's late answer is listened for.
 */
export function afterWrite(
  ledger: Ledger,
  progress: Extract<CallProgress, { kind: 'executed' }>,
  written: TransitionResult,
): ToolExecutionRecord {
  const { attempt } = progress.record;
  reportLoss(ledger, written, reported(attempt, progress.attempt.kind), attempt);
  keepListening(recordPlanOf(ledger, progress), progress.attempt, written);
  if (written.record === undefined) throw vanished(progress.record);
  return written.record;
}
