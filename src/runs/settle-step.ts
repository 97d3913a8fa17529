import {
  RepeatRaced,
  afterWrite,
  executedOutcome,
  executedTransition,
  reconcileHookOf,
  type CallProgress,
  type ToolCallOutcome,
} from '../calls/index.js';
import { crashPoint } from '../crash/index.js';
import { OncelyError } from '../errors/index.js';
import type { ToolExecutionRecord } from '../ledger/index.js';
import type { Checkpoint, CheckpointStatus, HeardResult, PendingCall } from '../run-state/index.js';
import {
  foreseenRecord,
  type NewApproval,
  type RunEventInput,
  type StoreTx,
  type TransitionResult,
} from '../store/index.js';
import { inSeconds, type DriveEnd } from './drive-end.js';
import { executeStep, recordInHand } from './execute-step.js';
import { heardOf, heardOfRecorded, toldFromHistory } from './heard.js';
import { toolMessage } from './messages.js';
import { planStep, type RepeatDecision, type StepPlan } from './plan-step.js';
import type { SaveExtras, StepDriver } from './step-driver.js';

/** A repeat a step wrote down (a `tool.repeat` event), as the runtime's `onRepeat` hears it. */
export interface RepeatInfo {
  readonly tenantId: string;
  readonly agent: string;
  readonly toolName: string;
  readonly decision: RepeatDecision;
}

/** What the settle step sees of its driver besides a step's view (`RunDriver` documents it). */
export interface SettleStepDriver extends StepDriver {
  readonly onRepeat: ((info: RepeatInfo) => void) | undefined;
}

/** Passes over one step: the second and third only ask reconcile hooks about calls just found unknown. */
const MAX_PASSES = 3;
/** Plans of one step again after a tenant-wide repeat check was overtaken (each finds the call a repeat). */
const MAX_RACED = 3;

type Executed = Extract<CallProgress, { kind: 'executed' }>;

/**
 * Settles the pending calls of the current step: plans them, reserves the ready ones together under
 * the lease (consuming their approvals in the same transaction), runs them in parallel as the ledger
 * allows, then records every outcome and the next checkpoint in one transaction. Returns the end of
 * the drive when the run waits or ends, or undefined when the model is to be called next.
 */
export async function settleStep(driver: SettleStepDriver): Promise<DriveEnd | undefined> {
  let raced = 0;
  for (let pass = 1; ; pass++) {
    const pending = driver.checkpoint.pending;
    if (pending === null) return undefined;
    const plan = await planStep(
      {
        ledger: driver.ledger,
        tenantId: driver.run.tenantId,
        runId: driver.run.runId,
        tools: driver.tools,
        fresh: driver.fresh,
        onRepeat: driver.agent.toolPolicy.onRepeat,
      },
      pending.calls,
    );
    let progress: Awaited<ReturnType<typeof executeStep>>;
    try {
      progress = await executeStep(driver, plan);
    } catch (error) {
      // Another run reserved the same effect between the plan and the reservation (a tenant-wide
      // window): nothing of this wave was reserved; plan again, and the call is found a repeat.
      if (error instanceof RepeatRaced && raced++ < MAX_RACED) continue;
      throw error;
    }
    const next = await commit(driver, pending.calls, plan, progress, pass < MAX_PASSES);
    if (next !== 'again') return next;
  }
}

interface Told {
  readonly calls: PendingCall[];
  /** Outcomes of calls executed in this pass that are unknown and have a reconcile hook to ask. */
  readonly askable: number;
  readonly unknown: PendingCall[];
  /**
   * When every unknown call only waits for an attempt of another process that may still land: when
   * the last of them can no longer land (ms). Null when some unknown call needs a settlement.
   */
  readonly waitUntil: number | null;
  readonly events: RunEventInput[];
}

/**
 * Records the executed outcomes and the next checkpoint in one write. What the checkpoint tells is
 * decided first, as if every outcome applies (the common case): then the outcomes and the checkpoint
 * are one statement on PostgreSQL. An outcome that does not apply (an operator settled the call
 * meanwhile), or a decision that also lets the run go or asks for approvals, is told from what was
 * written, in a transaction.
 */
async function commit(
  driver: SettleStepDriver,
  calls: readonly PendingCall[],
  planned: StepPlan,
  progress: Map<string, CallProgress>,
  mayPassAgain: boolean,
): Promise<DriveEnd | undefined | 'again'> {
  const plan = await withRecordedReasons(driver, planned, progress);
  const executed = [...progress].filter((e): e is [string, Executed] => e[1].kind === 'executed');
  const requests = executed.map(([, p]) => executedTransition(driver.ledger, p));
  const foreseen = executed.map(([, p], i) =>
    foreseenRecord(p.record, requests[i]!, driver.ledger.clock.now()),
  );
  const write = decide(
    driver,
    tell(driver, calls, plan, progress, outcomesOf(plan, progress, executed, foreseen)),
    plan,
    mayPassAgain,
  );
  let written: TransitionResult[] | undefined;
  if (write.release === undefined && write.approvals.length === 0) {
    await crashPoint('checkpoint.before-commit');
    const save = driver.saveRequest(write.checkpoint, write.status, write.extras);
    if (save !== undefined) {
      const recorded = await recordOrHand(driver, progress, () =>
        driver.ledger.store.recordStep({ transitions: requests, save }),
      );
      written = recorded.results;
      executed.forEach(([, p], i) => afterWrite(driver.ledger, p, written![i]!));
      if (recorded.version !== null) {
        const saved = driver.saved(save, recorded.version);
        if (saved) tellRepeats(driver, calls, plan);
        await crashPoint('tool.after-record');
        return saved ? write.then : driver.standDown();
      }
    }
  }
  // Told from what was written (the outcomes are written first if they are not yet).
  const writes: [Executed, TransitionResult][] = [];
  let committed = false;
  const result = await recordOrHand(
    driver,
    written === undefined ? progress : new Map<string, CallProgress>(),
    () =>
      driver.ledger.store.transaction(async (tx) => {
        const results = written ?? (await tx.ledger.transitions(requests));
        writes.length = 0;
        if (written === undefined) executed.forEach(([, p], i) => writes.push([p, results[i]!]));
        const records = executed.map(([, p], i) => {
          const record = results[i]?.record;
          if (record === undefined) throw new Error(`${p.record.idempotencyKey} vanished from the ledger`);
          return record;
        });
        const told = tell(driver, calls, plan, progress, outcomesOf(plan, progress, executed, records));
        committed = false; // a transaction tried again starts over
        return applyIn(driver, tx, decide(driver, told, plan, mayPassAgain), () => (committed = true));
      }),
  );
  for (const [p, w] of writes) afterWrite(driver.ledger, p, w);
  if (committed) tellRepeats(driver, calls, plan);
  await crashPoint('tool.after-record');
  return result;
}

/**
 * The plan with what the model hears of each call the ledger had already settled in a way whose words
 * need its history (an operator's completion and reason, a compensation, a conflict): read once here,
 * only for those calls. Every other outcome is told from its record alone.
 */
async function withRecordedReasons(
  driver: StepDriver,
  plan: StepPlan,
  progress: Map<string, CallProgress>,
): Promise<StepPlan> {
  let heard: Map<string, HeardResult> | undefined;
  for (const [id, p] of progress) {
    if (p.kind !== 'settled' || plan.heard.has(id) || !toldFromHistory(p.outcome)) continue;
    const told = await heardOfRecorded(driver.ledger.store.ledger, p.outcome);
    if (told === undefined) continue;
    heard ??= new Map(plan.heard);
    heard.set(id, told);
  }
  return heard === undefined ? plan : { ...plan, heard };
}

/**
 * A step's write; if it fails (a lost connection, a lock or statement timeout), what the calls came
 * to is still the truth, so each outcome in hand is recorded on its own before the drive stands down.
 */
async function recordOrHand<T>(
  driver: StepDriver,
  inHand: Map<string, CallProgress>,
  write: () => Promise<T>,
): Promise<T> {
  try {
    return await write();
  } catch (error) {
    await recordInHand(driver, inHand);
    throw error;
  }
}

/**
 * Tells `onRepeat` of each repeat of the step, once its `tool.repeat` event is written (so it counts
 * what the run's events say, and a write that was fenced out counts nothing).
 */
function tellRepeats(driver: SettleStepDriver, calls: readonly PendingCall[], plan: StepPlan): void {
  if (driver.onRepeat === undefined || plan.repeats.size === 0) return;
  for (const call of calls) {
    const repeat = plan.repeats.get(call.toolCallId);
    if (repeat === undefined) continue;
    try {
      driver.onRepeat({
        tenantId: driver.run.tenantId,
        agent: driver.agent.name,
        toolName: call.toolName,
        decision: repeat.decision,
      });
    } catch {
      // An observer's failure is not the run's.
    }
  }
}

/** Each call's outcome: settled ones as they came, executed ones from their records. */
function outcomesOf(
  plan: StepPlan,
  progress: Map<string, CallProgress>,
  executed: readonly [string, Executed][],
  records: readonly ToolExecutionRecord[],
): Map<string, ToolCallOutcome> {
  const outcomes = new Map<string, ToolCallOutcome>(plan.standing);
  for (const [id, p] of progress) if (p.kind === 'settled') outcomes.set(id, p.outcome);
  executed.forEach(([id, p], i) => outcomes.set(id, executedOutcome(p, records[i]!)));
  return outcomes;
}

function tell(
  driver: StepDriver,
  calls: readonly PendingCall[],
  plan: StepPlan,
  progress: Map<string, CallProgress>,
  outcomes: Map<string, ToolCallOutcome>,
): Told {
  const events: Told['events'] = [];
  const unknown: PendingCall[] = [];
  let askable = 0;
  let waitUntil: number | null = 0;
  const told = calls.map((call): PendingCall => {
    const id = call.toolCallId;
    const key = `${driver.run.runId}:${id}`;
    const repeat = plan.repeats.get(id);
    if (repeat !== undefined) {
      events.push({
        type: 'tool.repeat',
        data: { key, toolName: call.toolName, repeatOf: repeat.of, decision: repeat.decision },
      });
    }
    const outcome = outcomes.get(id);
    const heard = plan.heard.get(id) ?? (outcome === undefined ? undefined : heardOf(outcome, null));
    if (heard !== undefined && heard !== call.heard) {
      events.push({ type: 'tool.settled', data: { key, toolName: call.toolName, heard: heard.kind } });
      return { ...call, heard };
    }
    if (call.heard !== undefined || plan.awaiting.has(id)) return call;
    const waitsFor = plan.deferred.get(id);
    if (waitsFor !== undefined) return waitsFor === call.waitsFor ? call : { ...call, waitsFor };
    if (outcome?.status === 'unknown') {
      unknown.push(call);
      const retryAt = outcome.waiting?.retryAt;
      waitUntil =
        waitUntil === null || retryAt === undefined || retryAt === null
          ? null
          : Math.max(waitUntil, Date.parse(retryAt));
      events.push({
        type: 'tool.unknown',
        data: { key, toolName: call.toolName, status: outcome.record.status },
      });
      const tool = driver.tools.get(call.toolName);
      if (
        progress.get(id)?.kind === 'executed' &&
        tool !== undefined &&
        reconcileHookOf(tool) !== undefined
      ) {
        askable += 1;
      }
    }
    return call;
  });
  return { calls: told, askable, unknown, waitUntil, events };
}

/** What the step writes with its outcomes: the next checkpoint, and whatever goes with it. */
interface StepWrite {
  readonly checkpoint: Checkpoint;
  readonly status: CheckpointStatus;
  readonly extras: SaveExtras;
  /** What the drive does once it is saved. */
  readonly then: DriveEnd | undefined | 'again';
  /** The run let go in the same transaction, to be looked at again after the delay. */
  readonly release?: { readonly delayMs: number; readonly reason: string };
  /** Approvals asked for in the same transaction. */
  readonly approvals: readonly NewApproval[];
}

function decide(driver: StepDriver, told: Told, plan: StepPlan, mayPassAgain: boolean): StepWrite {
  const checkpoint = driver.checkpoint;
  const waiting: Checkpoint = { ...checkpoint, pending: { calls: told.calls } };
  const extras = { events: told.events };
  const going = (then: StepWrite['then']): StepWrite => ({
    checkpoint: waiting,
    status: 'running',
    extras,
    then,
    approvals: [],
  });
  if (told.unknown.length > 0) {
    // Just found unknown: write that down, then ask the reconcile hooks in the next pass.
    if (told.askable > 0 && mayPassAgain) return going('again');
    if (told.waitUntil !== null) {
      // Each unknown call is another process's attempt that may still land: run nothing, settle
      // nothing; let the run go and look again once the last of them can no longer land.
      const delayMs = Math.max(0, told.waitUntil - driver.ledger.clock.now());
      const keys = told.unknown.map((c) => `${driver.run.runId}:${c.toolCallId}`).join(', ');
      const reason =
        `tool call ${keys} may still be running in another process (its attempt has not timed out yet); ` +
        `looking again in ${inSeconds(delayMs)}`;
      return { ...going(undefined), release: { delayMs, reason } };
    }
    if (driver.agent.toolPolicy.onIndeterminate === 'fail') return failUnknown(driver, waiting, told);
    const reason = unknownReason(driver, told.unknown);
    const events = [...told.events, ...approvalEvents(plan)];
    return ending(driver, waiting, 'awaiting_reconciliation', { events, reason }, plan.newApprovals);
  }
  if (plan.deferred.size > 0) {
    // A call of this step waits for an identical one made in this pass: once that one is recorded,
    // the next pass says whether this one repeats an effect.
    if (mayPassAgain && [...plan.deferred.keys()].some((id) => plan.deferredInStep.has(id))) {
      return going('again');
    }
    const waits = [...plan.deferred].map(([id, earlier]) => `${driver.run.runId}:${id} (repeats ${earlier})`);
    const reason =
      `tool call ${waits.join(', ')} repeats an earlier identical call whose outcome is unknown: it ` +
      'waits until that call is settled (by its reconcile hook or an operator), then is treated by what it came to';
    const events = [...told.events, ...approvalEvents(plan)];
    return ending(driver, waiting, 'awaiting_reconciliation', { events, reason }, plan.newApprovals);
  }
  if (plan.awaiting.size > 0) {
    const keys = [...plan.awaiting].map((id) => `${driver.run.runId}:${id}`);
    const reason = `waiting for an operator to approve or reject ${keys.join(', ')}`;
    const events = [...told.events, ...approvalEvents(plan)];
    return ending(driver, waiting, 'awaiting_approval', { events, reason }, plan.newApprovals);
  }
  const next: Checkpoint = {
    messages: [...checkpoint.messages, toolMessage(told.calls)],
    step: checkpoint.step,
    pending: null,
  };
  return { checkpoint: next, status: 'running', extras, then: undefined, approvals: [] };
}

function ending(
  driver: StepDriver,
  checkpoint: Checkpoint,
  status: Exclude<CheckpointStatus, 'running'>,
  extras: SaveExtras,
  approvals: readonly NewApproval[] = [],
): StepWrite {
  const end = driver.ending(status, extras);
  return { checkpoint, status, extras: end.extras, then: end.end, approvals };
}

/** Writes the step's decision inside `tx`: the checkpoint, then the release or approvals with it. */
async function applyIn(
  driver: StepDriver,
  tx: StoreTx,
  write: StepWrite,
  saved: () => void,
): Promise<DriveEnd | undefined | 'again'> {
  if (!(await driver.save(tx, write.checkpoint, write.status, write.extras))) return driver.standDown();
  saved();
  if (write.release !== undefined) {
    return driver.release(tx, 'waiting', write.release.delayMs, write.release.reason);
  }
  // Asked for only with the checkpoint that waits for them, so each exists once it is announced.
  if (write.approvals.length > 0) await tx.runs.createApprovals(write.approvals);
  return write.then;
}

/**
 * Announces the step's approvals; only with the checkpoint that asks for them, never with a pass that
 * asks again later or a run that fails, so each is announced once and only once it exists.
 */
function approvalEvents(plan: StepPlan): RunEventInput[] {
  return plan.newApprovals.map((a) => ({
    type: 'approval.requested',
    data: { key: a.idempotencyKey, toolName: a.toolName },
  }));
}

function failUnknown(driver: StepDriver, checkpoint: Checkpoint, told: Told): StepWrite {
  const error = new OncelyError('RUN_CALL_UNKNOWN', unknownReason(driver, told.unknown), {
    details: { keys: told.unknown.map((c) => `${driver.run.runId}:${c.toolCallId}`) },
  });
  return ending(driver, checkpoint, 'failed', {
    events: told.events,
    error: error.toJSON(),
    reason: error.message,
  });
}

/** Names each unknown call and how to settle it. */
function unknownReason(driver: StepDriver, unknown: readonly PendingCall[]): string {
  const keys = unknown.map((c) => `${driver.run.runId}:${c.toolCallId} (${c.toolName})`);
  const first = `${driver.run.runId}:${unknown[0]?.toolCallId ?? ''}`;
  return (
    `the outcome of tool call ${keys.join(', ')} is unknown: it may or may not have taken effect. ` +
    `Check the downstream system, then settle it with \`oncely executions resolve ${first} ` +
    '--status completed|failed --reason "..."` (or the tool\'s reconcile hook)'
  );
}
