import { reconcileHookOf, reconcileRecord, type Ledger } from '../calls/index.js';
import { errorInfo } from '../errors/index.js';
import { isUnknownStatus, attemptDeadline, type ToolExecutionRecord } from '../ledger/index.js';
import type { UnknownCallOfRun, UnknownCallPosition } from '../store/index.js';
import type { Tool } from '../tools/index.js';
import { resumeIfReady } from './resume.js';

/*
 * The reconcile sweep: asks the reconcile hook of every unknown call this process has the tool of,
 * whatever its run's status — a paused run, but also one that failed (`RUN_RETRIES_EXCEEDED`,
 * `on_indeterminate: fail`), completed or was cancelled, whose call nobody would otherwise ask about
 * again. Calls of a `queued` or `running` run are left to its driver: it asks the hook itself when
 * it replays the call, and asking too would only race it.
 *
 * Each pass reads a page of every tenant's unknown calls, longest unknown first, from where the last
 * pass stopped (wrapping at the end), and asks at most `perPass` hooks. A call whose hook could not
 * tell (or threw) is asked again only after a wait that doubles each time, up to `maxWaitMs`. The
 * waits live in this process's memory: the ledger has no column for a next check, and a hook only
 * reads, so a restarted process (or a second one) asking early costs a read, never an effect.
 */

/** When a call's hook may be asked next, and the wait that set it. */
interface Wait {
  readonly dueAt: number;
  readonly waitMs: number;
}

/** What a process keeps between passes: the waits per call, and where the last pass stopped. */
export class ReconcileSweepState {
  readonly waits = new Map<string, Wait>();
  cursor: UnknownCallPosition | undefined;
}

export interface ReconcileSweepOptions {
  readonly ledger: Ledger;
  /** Tools by name: only calls of these are asked about (their hooks run here). */
  readonly tools: ReadonlyMap<string, Tool>;
  readonly state: ReconcileSweepState;
  /** Hooks asked at most per pass; default 20. */
  readonly perPass?: number;
  /**
   * The first wait after a hook could not tell, doubled at each answer like it; also how long a call
   * of a paused run is left alone when first seen (the drive that paused it has just asked). 0 asks
   * on every pass. Default 30 s.
   */
  readonly everyMs?: number;
  /** The longest wait between two asks of one call; default 10 minutes (never below `everyMs`). */
  readonly maxWaitMs?: number;
}

export interface ReconcileSweepResult {
  /** Hooks asked. */
  readonly asked: number;
  /** Calls a hook settled (`completed`, or `failed` where the decision table lets it). */
  readonly settled: number;
  /** Paused runs requeued because their last unknown call was settled. */
  readonly requeued: number;
}

export const DEFAULT_RECONCILE_PER_PASS = 20;
export const DEFAULT_RECONCILE_EVERY_MS = 30_000;
export const DEFAULT_RECONCILE_MAX_WAIT_MS = 600_000;
/** Waits remembered before they are forgotten at once (settled calls leave theirs behind). */
const MAX_WAITS = 10_000;

/** A key with its tenant, as one map key. */
const keyIn = (record: ToolExecutionRecord): string => `${record.tenantId}\u0000${record.idempotencyKey}`;

const positionOf = (record: ToolExecutionRecord): UnknownCallPosition => ({
  at: new Date(attemptDeadline(record)).toISOString(),
  tenantId: record.tenantId,
  key: record.idempotencyKey,
});

/**
 * One pass of the reconcile sweep (see above). Every write is the settlement's own compare-and-set
 * (`reconcileRecord`): an operator's resolve or a late outcome that lands first wins, and the hook's
 * answer is recorded as ignored. A paused run whose last unknown call it settles is requeued.
 */
export async function reconcileUnknownCalls(options: ReconcileSweepOptions): Promise<ReconcileSweepResult> {
  const { ledger, state } = options;
  const perPass = Math.max(1, options.perPass ?? DEFAULT_RECONCILE_PER_PASS);
  const limit = perPass * 4;
  const page = await ledger.store.monitor.unknownCallsOfAllTenants({
    limit,
    marginMs: ledger.landingMarginMs,
    ...(state.cursor === undefined ? {} : { after: state.cursor }),
  });
  if (state.waits.size > MAX_WAITS) state.waits.clear();
  let asked = 0;
  let settled = 0;
  let requeued = 0;
  let seen = 0;
  for (const call of page) {
    if (asked >= perPass) break;
    seen += 1;
    // A compensation's record bears its tool's name, but that tool's hook looks for the effect, not its undoing.
    const tool = call.record.compensationOf === null ? options.tools.get(call.record.toolName) : undefined;
    const hook = tool === undefined ? undefined : reconcileHookOf(tool);
    if (tool === undefined || hook === undefined || !due(options, call)) continue;
    asked += 1;
    const now = await ask(ledger, tool, hook, call.record);
    if (now === undefined || isUnknownStatus(now.status)) {
      waitLonger(options, call.record);
      continue;
    }
    state.waits.delete(keyIn(call.record));
    settled += 1;
    if (await resumeIfReady(ledger, now.tenantId, now.runId)) requeued += 1;
  }
  const last = page[seen - 1];
  // The whole page was looked at and it was the end: the next pass starts again from the oldest.
  state.cursor =
    last === undefined || (page.length < limit && seen === page.length) ? undefined : positionOf(last.record);
  return { asked, settled, requeued };
}

/** Whether the hook of this call is to be asked now; the decision table has the last word. */
function due(options: ReconcileSweepOptions, call: UnknownCallOfRun): boolean {
  const { ledger, state } = options;
  if (ledger.decide(call.record, 'run', true).action !== 'ask_hook') return false;
  const id = keyIn(call.record);
  const wait = state.waits.get(id);
  const every = options.everyMs ?? DEFAULT_RECONCILE_EVERY_MS;
  if (wait === undefined && call.runStatus === 'awaiting_reconciliation' && every > 0) {
    // First seen paused: the drive that paused it has just asked; wait a full interval from now.
    state.waits.set(id, { dueAt: ledger.clock.now() + every, waitMs: every });
    return false;
  }
  return wait === undefined || ledger.clock.now() >= wait.dueAt;
}

/** After an answer that settled nothing: the next ask waits twice as long as the last, within bounds. */
function waitLonger(options: ReconcileSweepOptions, record: ToolExecutionRecord): void {
  const every = options.everyMs ?? DEFAULT_RECONCILE_EVERY_MS;
  const most = Math.max(every, options.maxWaitMs ?? DEFAULT_RECONCILE_MAX_WAIT_MS);
  const id = keyIn(record);
  const last = options.state.waits.get(id);
  const waitMs = last === undefined ? every : Math.min(most, Math.max(every, last.waitMs * 2));
  options.state.waits.set(id, { dueAt: options.ledger.clock.now() + waitMs, waitMs });
}

/** Asks one hook and records its answer; undefined when the store could not be reached (a warning). */
async function ask(
  ledger: Ledger,
  tool: Tool,
  hook: NonNullable<ReturnType<typeof reconcileHookOf>>,
  record: ToolExecutionRecord,
): Promise<ToolExecutionRecord | undefined> {
  try {
    return await reconcileRecord(ledger, tool, hook, record);
  } catch (error) {
    process.emitWarning(`oncely: reconcile of ${record.idempotencyKey} failed: ${errorInfo(error).message}`);
    return undefined;
  }
}
