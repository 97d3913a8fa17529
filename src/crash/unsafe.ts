/**
 * Test-only switches that break oncely's promise on purpose, so a drill can show that it notices
 * (`oncely drill`'s own tests: a drill that cannot fail proves nothing). Armed only by the
 * environment of the process (`ONCELY_UNSAFE_TEST_SWITCHES=no-ledger`, a comma-separated list), read once when the module
 * loads; a worker with one armed says so loudly when it starts. Never set them anywhere else.
 *
 * - `no-ledger`: a call whose record is `started` (its process died mid-call, or another process is
 *   in the middle of it) is run again under the same record, as a runtime without a ledger would
 *   replay it, instead of being waited for, asked of its hook or left to an operator.
 * - `ignore-lost-lease`: a driver whose lease is lost (it froze past it and another process claimed
 *   the run, or a fenced write was refused) is never told so: its tools are not aborted, and when a
 *   write of its is fenced out it reserves the step's calls anyway, without the fence, then reads the
 *   run again and drives on from what it finds, as a runtime without fencing would (up to eight
 *   times a drive). Its checkpoints are still refused by the store.
 */
export const UNSAFE_SWITCHES = ['no-ledger', 'ignore-lost-lease'] as const;
export type UnsafeSwitch = (typeof UNSAFE_SWITCHES)[number];

const ARMED: ReadonlySet<string> = new Set(
  (process.env.ONCELY_UNSAFE_TEST_SWITCHES ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== ''),
);

export function unsafeSwitch(name: UnsafeSwitch): boolean {
  return ARMED.has(name);
}

/** The switches armed in this process (for the warning a worker prints when it starts). */
export function armedUnsafeSwitches(): readonly string[] {
  return [...ARMED];
}
