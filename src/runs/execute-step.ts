import {
  inToolSlots,
  proceedCall,
  recheckWindowed,
  type WindowedCall,
  recordOutcome,
  recordPlanOf,
  recordWave,
  type CallProgress,
  type PreparedCall,
  type Reserve,
} from '../calls/index.js';
import { crashPoint, unsafeSwitch } from '../crash/index.js';
import { OncelyError, errorInfo } from '../errors/index.js';
import type { ReserveResult } from '../store/index.js';
import type { StepPlan } from './plan-step.js';
import type { StepDriver } from './step-driver.js';

/** A test-only switch (`ONCELY_UNSAFE_TEST_SWITCHES`): a fenced-out reservation goes ahead unfenced. */
const IGNORE_LOST_LEASE = unsafeSwitch('ignore-lost-lease');

/**
 * Runs the ready calls of a step's plan: each wave (see `inToolSlots`) reserved together under the
 * lease, consuming its approvals in the same write, then its calls run in parallel as the ledger
 * allows. Answers where each call stands; its outcome is recorded by the step's commit. When the
 * step cannot go on, the outcomes in hand are recorded on their own before the error is rethrown.
 */
export async function executeStep(driver: StepDriver, plan: StepPlan): Promise<Map<string, CallProgress>> {
  const progress = new Map<string, CallProgress>();
  if (plan.ready.length === 0) return progress;
  const fenced = fencedReserve(driver, plan.windowed);
  const reserve: Reserve = (requests) => fenced(requests, []);
  let failure: PromiseRejectedResult | undefined;
  let ran = 0;
  // Calls of a tool with a cluster-wide limit wait for a slot before they are reserved (in waves).
  const slotted = inToolSlots(driver.ledger, plan.ready, driver.lease.signal, async (wave) => {
    const answers = new Map<PreparedCall, CallProgress | 'not-run' | undefined>();
    if (failure !== undefined) {
      for (const call of wave) answers.set(call, 'not-run');
      return answers;
    }
    const ids = new Set(wave.map((c) => c.request.toolCallId));
    const reservations = await fenced(
      wave.map((c) => c.request),
      plan.consume.filter((c) => ids.has(c.request.toolCallId)),
    );
    const settled: PromiseSettledResult<CallProgress>[] = await Promise.allSettled(
      wave.map((call, i) =>
        proceedCall(driver.ledger, call, reservations[i], {
          signal: driver.lease.signal,
          fencingToken: driver.lease.epoch,
          caller: 'run',
          reserve,
          traceContext: driver.traceContext,
        }),
      ),
    );
    // A later wave may wait for a slot: this wave's outcomes are recorded now, not with the step.
    ran += wave.length;
    if (ran < plan.ready.length) await recordWave(driver.ledger, settled);
    // Every call of the wave has finished; only then may one call's error end the step.
    wave.forEach((call, i) => {
      const s = settled[i];
      if (s?.status === 'fulfilled') {
        progress.set(call.request.toolCallId, s.value);
        answers.set(call, s.value);
      } else if (s !== undefined) {
        failure ??= s;
        answers.set(call, undefined);
      }
    });
    return answers;
  });
  // Waiting for a slot may end the step (the lease lost, a store error) after earlier waves ran.
  const stopped = await slotted.then(
    () => failure,
    (error: unknown) => ({ reason: error }),
  );
  if (stopped !== undefined) {
    // The step cannot go on, but the outcomes in hand are the truth: left `started`, a call that
    // completed would look unknown to whoever replays the step.
    await recordInHand(driver, progress);
    throw stopped.reason;
  }
  return progress;
}

/** Records the outcomes of the calls executed in this pass on their own, without a checkpoint. */
export async function recordInHand(driver: StepDriver, progress: Map<string, CallProgress>): Promise<void> {
  for (const p of progress.values()) {
    if (p.kind !== 'executed') continue;
    try {
      await recordOutcome(recordPlanOf(driver.ledger, p), p.attempt);
    } catch (error) {
      // Still `started`: recovery asks the reconcile hook, or an operator settles it.
      process.emitWarning(
        `oncely: could not record the outcome of ${p.record.idempotencyKey}: ${errorInfo(error).message}`,
      );
    }
  }
}

/**
 * Reserves under the run's lease: the lease is renewed (and so checked, and locked against a claim)
 * in the same write, and approved calls consume their approval there, so an approval is used by
 * exactly one reservation. A step's first reservation saves the model's response first, in the same
 * write: one statement on PostgreSQL when nothing is consumed and every call is new.
 */
function fencedReserve(driver: StepDriver, windowed: readonly WindowedCall[]) {
  const { ledger, run, lease } = driver;
  return async (
    requests: readonly PreparedCall['request'][],
    consume: readonly PreparedCall[],
  ): Promise<ReserveResult[]> => {
    const keys = new Set(requests.map((r) => r.idempotencyKey));
    // A new call as it is reserved; a recorded one only as it is re-opened.
    const reopening = new Set(
      requests.filter((r) => r.reopenVersion !== undefined).map((r) => r.idempotencyKey),
    );
    const recheck = windowed.filter(
      (w) =>
        keys.has(w.request.idempotencyKey) &&
        (w.recorded !== true || reopening.has(w.request.idempotencyKey)),
    );
    // A driver that knows its lease is gone (it froze past it) reserves nothing, even if nobody has
    // claimed the run yet: the database would still renew an unexpired lease, never an expired one.
    if (lease.lost) throw leaseLost(run.runId, lease.epoch);
    const response = driver.responseSave();
    if (response !== undefined) await crashPoint('checkpoint.before-commit');
    if (
      response !== undefined &&
      consume.length === 0 &&
      recheck.length === 0 &&
      requests.every((r) => r.reopenVersion === undefined)
    ) {
      const step = await ledger.store.reserveStep({
        save: response,
        reservations: requests,
        actor: ledger.actor,
      });
      if (driver.responseSaved(response, step?.version)) return step!.reservations;
      if (!IGNORE_LOST_LEASE) throw leaseLost(run.runId, lease.epoch);
      return ledger.store.ledger.reserve(requests, ledger.actor);
    }
    return ledger.store.transaction(async (tx) => {
      const held =
        response === undefined
          ? await tx.runs.renewLease(
              { tenantId: run.tenantId, runId: run.runId, leaseEpoch: lease.epoch },
              driver.owner,
              driver.leaseMs,
            )
          : driver.responseSaved(response, await tx.runs.saveCheckpoint(response));
      if (!held && !IGNORE_LOST_LEASE) throw leaseLost(run.runId, lease.epoch);
      for (const call of consume) {
        const used = await tx.runs.consumeApproval(
          run.tenantId,
          call.request.idempotencyKey,
          call.request.argsDigest,
        );
        if (!used) throw new Error(`the approval of ${call.request.idempotencyKey} could not be consumed`);
      }
      // Another run may have reserved the same effect since the plan: checked again under a lock.
      if (recheck.length > 0) await recheckWindowed(tx.ledger, ledger.clock.now(), recheck, keys);
      return tx.ledger.reserve(requests, ledger.actor);
    });
  };
}

function leaseLost(runId: string, epoch: number): OncelyError {
  return new OncelyError(
    'RUN_LEASE_LOST',
    `lost the lease on run ${runId} (epoch ${epoch}) before reserving`,
  );
}
