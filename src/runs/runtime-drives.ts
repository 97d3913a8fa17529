import { OncelyError, errorInfo } from '../errors/index.js';
import type { ErrorInfo } from '../ledger/index.js';
import type { RunRecord } from '../run-state/index.js';
import type { Store } from '../store/index.js';
import { inSeconds, retryDelay, type DriveEnd } from './drive-end.js';

/** A run `recover()` drove: how its drive ended, or the error it threw (its lease then expires). */
export interface RecoveredRun {
  readonly tenantId: string;
  readonly runId: string;
  readonly end: DriveEnd | { readonly kind: 'error'; readonly error: ErrorInfo };
}

/** Ends a run claimed more times than its drives may fail, with the last error it recorded. */
export async function failExhausted(
  store: Store,
  maxDriveAttempts: number,
  run: RunRecord,
): Promise<DriveEnd> {
  const failed = run.driveAttempts - 1;
  const last = run.lastError === null ? 'none was recorded (the process died)' : run.lastError.message;
  const error = new OncelyError(
    'RUN_RETRIES_EXCEEDED',
    `run ${run.runId} was driven ${failed} times without getting anywhere (the most this runtime tries is ` +
      `${maxDriveAttempts}); the last error: ${last}. Fix the cause, then \`oncely runs retry ${run.runId} --reason "..."\``,
    { details: { runId: run.runId, driveAttempts: failed, lastError: run.lastError } },
  );
  const version = await store.runs.saveCheckpoint({
    fence: {
      tenantId: run.tenantId,
      runId: run.runId,
      leaseEpoch: run.leaseEpoch,
      checkpointVersion: run.checkpointVersion,
    },
    checkpoint: run.checkpoint,
    storedMessages: run.checkpoint.messages.length,
    status: 'failed',
    error: error.toJSON(),
    reason: error.message,
    events: [{ type: 'run.status', data: { status: 'failed', reason: error.message } }],
  });
  if (version === undefined) return { kind: 'stood_down', reason: 'another process holds the run' };
  return { kind: 'ended', status: 'failed', error: error.toJSON(), reason: error.message };
}

/** A drive threw: record its error and let the run go, to be claimed again after a backoff. */
export async function releaseFailedDrive(
  store: Store,
  limits: { readonly retryBaseMs: number; readonly maxDriveAttempts: number },
  run: RunRecord,
  thrown: unknown,
): Promise<void> {
  const { retryBaseMs, maxDriveAttempts } = limits;
  const info = errorInfo(thrown);
  const delayMs = retryDelay(retryBaseMs, run.driveAttempts);
  try {
    await store.runs.release({
      fence: { tenantId: run.tenantId, runId: run.runId, leaseEpoch: run.leaseEpoch },
      cause: 'failed_drive',
      delayMs,
      reason:
        `drive ${run.driveAttempts} of at most ${maxDriveAttempts} failed: ${info.message}; ` +
        `trying again in ${inSeconds(delayMs)}`,
      lastError: info,
    });
  } catch {
    // The store is unreachable: the lease expires and the run is claimed again all the same.
  }
}
