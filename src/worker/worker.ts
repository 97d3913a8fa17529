import { hostname } from 'node:os';
import { ringToolSlots } from '../calls/index.js';
import { errorInfo } from '../errors/index.js';
import { packageVersion } from '../util/package-version.js';
import type { RunRecord } from '../run-state/index.js';
import { HANDED_OFF, type DriveEnd, type Runtime } from '../runs/index.js';

export interface WorkerOptions {
  /** Runs driven at once by this process; default 4. */
  readonly concurrency?: number;
  /** How long to wait before looking for work again when there was none; default 1000 ms. */
  readonly pollMs?: number;
  /** How often waiting runs are checked for a settlement or a decision; default 2000 ms. */
  readonly sweepMs?: number;
  /** Where the worker says what it did; default nothing. */
  readonly log?: WorkerLog;
  /**
   * How often the worker writes its heartbeat to the store's worker registry (`oncely workers`,
   * GET /v1/workers); default 5000 ms. Seen, never decisive: leases alone decide who drives a run.
   */
  readonly heartbeatMs?: number;
  /** What it is in the registry: `worker` (default) or `serve` (an API process with its worker). */
  readonly kind?: 'worker' | 'serve';
  /**
   * Listen for wake-ups where the store carries them (PostgreSQL LISTEN/NOTIFY): a queued run is
   * claimed and a settled call swept at once instead of at the next poll. Default true; polling
   * goes on either way, and finishes every run without them.
   */
  readonly wakeups?: boolean;
  /**
   * Workflows to advance (a `WorkflowEngine`): each pass claims the workflow runs that are due and
   * starts their next node runs; a node run this worker ends wakes its workflow run at once.
   */
  readonly workflows?: WorkflowAdvancer;
}

/** What the worker needs of a `WorkflowEngine`. */
export interface WorkflowAdvancer {
  advanceDue(limit?: number): Promise<number>;
  runEnded(tenantId: string, runId: string): Promise<void>;
}

export const DEFAULT_HEARTBEAT_MS = 5_000;
/** A worker is shown live while its last heartbeat is at most this many of its periods old. */
export const LIVE_HEARTBEATS = 3;

/** The worker's structured log lines (a pino logger fits). */
export interface WorkerLog {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

export interface Worker {
  /** Runs being driven right now. */
  readonly active: number;
  /** Wake-ups heard since it started (LISTEN/NOTIFY or Redis). */
  readonly wakeupsHeard: number;
  /**
   * Stops claiming; each run being driven lets go at its next step boundary (queued for another
   * worker at once); resolves when the loop has ended. What a step has in flight finishes first.
   */
  stop(): Promise<void>;
  /** Resolves when the loop ends (after `stop()`). */
  readonly done: Promise<void>;
}

const silent: WorkerLog = { info: () => undefined, warn: () => undefined, error: () => undefined };

/**
 * Polls the store for free runs — queued, or held under a lease that expired because its driver
 * died or froze — claims them with a higher epoch and drives them from their checkpoint, up to
 * `concurrency` at once; every `sweepMs` it requeues waiting runs that nothing holds any more.
 * `stop()` hands the runs it drives to other workers between steps.
 *
 * @example
 * const worker = startWorker(runtime, { concurrency: 8 });
 * process.once('SIGTERM', () => void worker.stop());
 */
/**
 * Who drove the run before this claim (the owner of its claim before the newest), for the log; a
 * store that cannot say leaves it unknown.
 */
async function previousDriver(runtime: Runtime, run: RunRecord): Promise<string | undefined> {
  try {
    const claims = await runtime.store.runs.lastClaims(run.tenantId, run.runId, 2);
    const before = claims.find((c) => {
      const data = c.data as { epoch?: unknown } | null;
      return typeof data?.epoch === 'number' && data.epoch < run.leaseEpoch;
    });
    const owner = (before?.data as { owner?: unknown } | undefined)?.owner;
    return typeof owner === 'string' ? owner : undefined;
  } catch {
    return undefined;
  }
}

export function startWorker(runtime: Runtime, options: WorkerOptions = {}): Worker {
  const concurrency = options.concurrency ?? 4;
  const pollMs = options.pollMs ?? 1000;
  const sweepMs = options.sweepMs ?? 2000;
  const log = options.log ?? silent;
  const heartbeatMs = options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
  // Polls, naps and heartbeats keep the runtime's time (a simulation's virtual clock).
  const clock = runtime.clock;
  const stopping = new AbortController();
  const beat = (isStopping: boolean) => ({
    workerId: runtime.owner,
    kind: options.kind ?? 'worker',
    host: hostname(),
    pid: process.pid,
    concurrency,
    version: packageVersion(),
    stopping: isStopping,
  });
  let lastBeat = 0;
  /** Writes the heartbeat when it is due; a store that cannot take it is said once per failure run. */
  let beatFailing = false;
  const heartbeat = async (isStopping = false): Promise<void> => {
    lastBeat = clock.now();
    try {
      await runtime.store.workers.heartbeat(beat(isStopping));
      beatFailing = false;
    } catch (error) {
      if (!beatFailing) log.warn({ err: errorInfo(error) }, 'cannot write the heartbeat; trying again');
      beatFailing = true;
    }
  };
  const drives = new Set<Promise<void>>();
  /** The loop's wait for work, while it waits; a wake-up that comes while it works is kept for it. */
  let napping: AbortController | undefined;
  let nudged = false;
  const wake = (): void => {
    if (napping === undefined) nudged = true;
    else napping.abort();
  };
  let lastSweep = 0;
  let wakeupsHeard = 0;
  // LISTEN/NOTIFY where the store has it: a queued run is claimed, a settled call swept, at once;
  // a tool slot freed elsewhere is taken by a call of this process waiting for one.
  const listener =
    options.wakeups === false
      ? undefined
      : runtime.store.wakeups?.listen({
          onWake: (kind) => {
            wakeupsHeard += 1;
            if (kind === 'slot') {
              ringToolSlots(runtime.ledger.store.toolSlots);
              return;
            }
            if (kind === 'settled') lastSweep = 0;
            wake();
          },
          onState: (state, error) => {
            if (state === 'listening') log.info({}, 'listening for wake-ups');
            else
              log.warn(
                { err: errorInfo(error) },
                'lost the wake-up connection; polling until it is back (reconnecting with backoff)',
              );
          },
        });

  const driveOne = async (run: RunRecord): Promise<void> => {
    const fields = { runId: run.runId, tenantId: run.tenantId, epoch: run.leaseEpoch };
    // A claim counts a drive; a drive that ends cleanly (a wait, an end, a hand-over) clears the
    // count. More than one: the last drive did not end, its driver died, froze past its lease or failed.
    if (run.driveAttempts > 1) {
      const previous = await previousDriver(runtime, run);
      const taken = { ...fields, agent: run.agent, driveAttempt: run.driveAttempts, previousOwner: previous };
      if (previous === runtime.owner) {
        log.warn(taken, 'recovered run: its last drive, here, did not end (it failed)');
      } else {
        log.warn(
          taken,
          'took over run: its last drive did not end (its driver died, froze past its lease, or failed)',
        );
      }
    } else {
      log.info({ ...fields, agent: run.agent, status: run.status }, 'claimed run');
    }
    try {
      logEnd(log, fields, await runtime.driveClaimed(run));
    } catch (error) {
      log.error(
        { ...fields, err: errorInfo(error) },
        'drive failed; the run is recovered when its lease expires',
      );
    }
    try {
      await options.workflows?.runEnded(run.tenantId, run.runId);
    } catch (error) {
      // Its workflow run is looked at when it is next due anyway.
      log.warn({ ...fields, err: errorInfo(error) }, 'cannot wake the workflow run of this node run');
    }
  };

  const loop = async (): Promise<void> => {
    while (!stopping.signal.aborted) {
      let idle = true;
      if (clock.now() - lastBeat >= heartbeatMs) await heartbeat();
      try {
        if (clock.now() - lastSweep >= sweepMs) {
          lastSweep = clock.now();
          const requeued = await runtime.sweep();
          if (requeued > 0) log.info({ requeued }, 'requeued waiting runs that nothing holds any more');
        }
        if (options.workflows !== undefined && (await options.workflows.advanceDue()) > 0) idle = false;
        while (drives.size < concurrency && !stopping.signal.aborted) {
          const run = await runtime.claimNext();
          if (run === undefined) break;
          idle = false;
          const drive = driveOne(run).finally(() => {
            drives.delete(drive);
            wake();
          });
          drives.add(drive);
        }
      } catch (error) {
        log.warn({ err: errorInfo(error) }, 'cannot reach the store; trying again');
      }
      if (!idle && drives.size < concurrency) continue;
      if (nudged) {
        nudged = false;
        continue;
      }
      const untilBeat = Math.max(0, lastBeat + heartbeatMs - clock.now());
      const nap = new AbortController();
      napping = nap;
      await clock
        .sleep(Math.min(pollMs, untilBeat), AbortSignal.any([stopping.signal, nap.signal]))
        .catch(() => undefined);
      napping = undefined;
    }
    await listener?.close();
    // Seen stopping while its runs are handed over; gone from the registry once they are.
    await heartbeat(true);
    await Promise.allSettled([...drives]);
    try {
      await runtime.store.workers.remove(runtime.owner);
    } catch (error) {
      log.warn({ err: errorInfo(error) }, 'cannot remove this worker from the registry; it ages out');
    }
  };

  const done = loop();
  return {
    get active() {
      return drives.size;
    },
    get wakeupsHeard() {
      return wakeupsHeard;
    },
    async stop() {
      stopping.abort();
      runtime.handOff();
      await done;
    },
    done,
  };
}

function logEnd(log: WorkerLog, fields: Record<string, unknown>, end: DriveEnd): void {
  if (end.kind === 'ended') {
    const why = {
      ...fields,
      status: end.status,
      ...(end.error == null ? {} : { code: end.error.code }),
      ...(end.reason == null ? {} : { reason: end.reason }),
    };
    // A failed run needs someone; a run waiting on unknown calls needs an operator or a hook.
    if (end.status === 'failed') log.error(why, 'run is failed');
    else if (end.status === 'awaiting_reconciliation') log.warn(why, `run is ${end.status}`);
    else log.info(why, `run is ${end.status}`);
  } else if (end.kind === 'released' && end.reason === HANDED_OFF)
    log.info(fields, 'handed the run over between steps: another worker claims it now');
  else if (end.kind === 'released')
    log.warn({ ...fields, delayMs: end.delayMs, reason: end.reason }, 'released the run, to try again later');
  else log.warn({ ...fields, reason: end.reason }, 'stood down: another process holds the run');
}
