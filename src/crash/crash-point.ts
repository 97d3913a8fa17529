/**
 * Named places where a drill may kill this process. They do nothing unless armed by the environment:
 * `ONCELY_CRASH_AT=tool.after-effect` (a comma-separated list of names) kills the process with SIGKILL
 * the first time it reaches one of them; `ONCELY_CRASH_SKIP=N` lets the first N arrivals pass.
 */
export const CRASH_POINTS = [
  'model.before-call',
  'model.after-call',
  'checkpoint.before-commit',
  'tool.after-reserve',
  'tool.before-execute',
  'tool.after-effect',
  'tool.after-record',
] as const;
/**
 * The points of a workflow's own bookkeeping (the drill's schedule is the run's points above): before
 * an advance writes, after it started node runs, after a node's run ended and before its workflow
 * was told.
 */
export const WORKFLOW_CRASH_POINTS = [
  'workflow.before-advance',
  'workflow.after-node-start',
  'workflow.after-node-end',
] as const;
export type CrashPointName = (typeof CRASH_POINTS)[number] | (typeof WORKFLOW_CRASH_POINTS)[number];

let arrivals = 0;

/** What the simulator asks at every crash point, in-process (undefined outside the simulator). */
let hook: ((name: CrashPointName) => Promise<void>) | undefined;

/**
 * The simulator's crash points: `hook` is asked at each one with its name and may end the simulated
 * process there (it never returns). Undefined removes it. Not for production use.
 */
export function setCrashPointHook(next: ((name: CrashPointName) => Promise<void>) | undefined): void {
  hook = next;
}

/** Read once, when the module loads: a drill arms the process it starts, never one already running. */
const ARMED: ReadonlySet<string> = new Set(
  (process.env.ONCELY_CRASH_AT ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== ''),
);
const SKIP = Number(process.env.ONCELY_CRASH_SKIP ?? '0');

/** Kills the process here when armed; otherwise returns at once. */
export async function crashPoint(name: CrashPointName): Promise<void> {
  if (hook !== undefined) await hook(name);
  if (ARMED.size === 0 || !ARMED.has(name)) return;
  arrivals += 1;
  if (arrivals <= SKIP) return;
  process.stderr.write(`oncely: crash point ${name} armed; killing process ${process.pid}\n`);
  process.kill(process.pid, 'SIGKILL');
  // SIGKILL is not delivered synchronously; make sure nothing after this point runs.
  await new Promise<never>(() => undefined);
}
