import { InvalidArgumentError, Option } from 'commander';
import type { Logger } from 'pino';
import { errorInfo } from '../errors/index.js';
import type { Runtime } from '../runs/index.js';

/** How long `serve` and `worker` wait, once told to stop, for what is in flight (`--grace-ms`). */
export const DEFAULT_GRACE_MS = 10_000;

/** `--grace-ms`, shared by `serve` and `worker`; `ONCELY_GRACE_MS` sets it too. */
export function graceOption(): Option {
  return new Option(
    '--grace-ms <ms>',
    'how long a stop (SIGTERM) waits for the requests, runs and late tool answers in flight',
  )
    .env('ONCELY_GRACE_MS')
    .argParser((value) => {
      const ms = Number(value);
      if (!Number.isInteger(ms) || ms < 1)
        throw new InvalidArgumentError('--grace-ms must be a whole number above 0');
      return ms;
    })
    .default(DEFAULT_GRACE_MS);
}

/**
 * Past the grace, lets go of the runs still being driven (mid-step), so another process claims them
 * at once instead of when their lease expires; says how many.
 */
export async function releaseInFlight(runtime: Runtime, log: Logger): Promise<void> {
  const released = await runtime.releaseDriven(
    'the process driving the run stopped before its step finished (the grace ran out); released for another to claim at once',
  );
  if (released > 0) {
    log.warn(
      { released },
      `released ${released} run(s) still in flight for another process to claim now; their calls in flight stay as recorded`,
    );
  }
}

/** How long the store may take to close (and the runs still in flight be released), after the grace. */
const STORE_CLOSE_MS = 2_000;

/**
 * How long, after "stopped", something a hung tool left open (a socket, a timer) may keep the
 * process alive before it exits anyway.
 */
const LINGER_MS = 500;

/** One thing a command stops, in order: the API, the worker, the late tool answers. */
export interface StopStep {
  /** For the log: "the worker". */
  readonly what: string;
  /** Stops it; `leftMs` is what is left of the grace. */
  readonly stop: (leftMs: number) => Promise<unknown>;
}

/**
 * Stops a long-running command within one grace: each step is waited for until the grace is over,
 * then let go (a run still in flight is recovered by another process when its lease expires; a late
 * tool answer not in by then leaves its call unknown, as recorded). The store is closed in any case,
 * `stoppedMessage` is logged, and the process exits soon after even if a hung tool or hook holds a
 * socket or a timer open. Every wait here races a timer, so the event loop never runs empty while a
 * promise nothing will settle is awaited (Node would end the process with exit code 13).
 */
export async function stopWithin(
  log: Logger,
  graceMs: number,
  steps: readonly StopStep[],
  closeStore: () => Promise<void>,
  stoppedMessage: string,
): Promise<void> {
  const deadline = Date.now() + graceMs;
  const unfinished: string[] = [];
  for (const step of steps) {
    const leftMs = Math.max(0, deadline - Date.now());
    const ended = await within(log, step.what, () => step.stop(leftMs), leftMs);
    if (!ended) unfinished.push(step.what);
  }
  if (unfinished.length > 0) {
    log.warn(
      { graceMs, unfinished },
      `not finished within the grace of ${graceMs} ms: ${unfinished.join(', ')}; letting go (runs in ` +
        'flight are recovered when their lease expires; calls whose tool has not answered stay unknown)',
    );
  }
  if (!(await within(log, 'the store', closeStore, STORE_CLOSE_MS))) {
    log.warn({ ms: STORE_CLOSE_MS }, 'the store did not close in time; exiting without waiting for it');
  }
  log.info({}, stoppedMessage);
  // Unref'd: a process with nothing left open exits at once; one held open by a hung tool, soon.
  setTimeout(() => process.exit(), LINGER_MS).unref();
}

/** Whether `work` ended (or failed, which is logged) within `ms`. */
async function within(log: Logger, what: string, work: () => Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const ended = Promise.resolve()
    .then(work)
    .then(
      () => true,
      (error: unknown) => {
        log.error({ err: errorInfo(error) }, `stopping ${what} failed`);
        return true;
      },
    );
  try {
    return await Promise.race([ended, timedOut]);
  } finally {
    clearTimeout(timer);
  }
}
