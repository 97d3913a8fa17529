import { reconcileHookOf, reconcileRecord, type Ledger } from '../calls/index.js';
import { errorInfo } from '../errors/index.js';
import { isUnknownStatus, type ToolExecutionRecord } from '../ledger/index.js';
import type { PendingCall, RunRecord } from '../run-state/index.js';
import type { WaitingCursor } from '../store/index.js';
import type { Tool } from '../tools/index.js';

/** What a waiting run still waits for: unknown calls, or approvals not yet decided. */
export interface Blockers {
  readonly unknown: readonly ToolExecutionRecord[];
  readonly undecided: readonly string[];
}

function unheard(run: RunRecord): readonly PendingCall[] {
  return (run.checkpoint.pending?.calls ?? []).filter((c) => c.heard === undefined);
}

/** Reads what holds a waiting run: its unknown calls (`awaiting_reconciliation`) or undecided approvals. */
export async function blockersOf(ledger: Ledger, run: RunRecord): Promise<Blockers> {
  const calls = unheard(run);
  if (run.status === 'awaiting_reconciliation') {
    const records = await Promise.all(
      calls.map((c) => ledger.store.ledger.get(run.tenantId, `${run.runId}:${c.toolCallId}`)),
    );
    const unknown = records.filter(
      (r): r is ToolExecutionRecord => r !== undefined && isUnknownStatus(r.status),
    );
    return { unknown, undecided: [] };
  }
  if (run.status === 'awaiting_approval') {
    const approvals = await ledger.store.runs.approvalsOfRun(run.tenantId, run.runId);
    const keys = new Set(calls.map((c) => `${run.runId}:${c.toolCallId}`));
    const undecided = approvals
      .filter((a) => keys.has(a.idempotencyKey) && a.status === 'pending')
      .map((a) => a.idempotencyKey);
    return { unknown: [], undecided };
  }
  return { unknown: [], undecided: [] };
}

/**
 * Puts a waiting run back in the queue once nothing holds it: every unknown call settled (by the
 * reconcile hook, an operator, a late outcome), or every approval decided. Compare-and-set on the
 * status, so of several processes noticing at once one requeues it. True when this call did.
 */
export async function resumeIfReady(ledger: Ledger, tenantId: string, runId: string): Promise<boolean> {
  const run = await ledger.store.runs.get(tenantId, runId);
  if (run === undefined) return false;
  if (run.status !== 'awaiting_reconciliation' && run.status !== 'awaiting_approval') return false;
  const blockers = await blockersOf(ledger, run);
  if (blockers.unknown.length > 0 || blockers.undecided.length > 0) return false;
  const reason =
    run.status === 'awaiting_reconciliation' ? 'every unknown call is settled' : 'every approval is decided';
  return ledger.store.runs.requeue(tenantId, runId, [run.status], reason);
}

export interface SweepOptions {
  readonly ledger: Ledger;
  /** Tools by name, to ask the reconcile hooks of unknown calls. */
  readonly tools: ReadonlyMap<string, Tool>;
  /** Runs looked at per status and sweep. */
  readonly batch?: number;
  /**
   * A hook is asked about a call at most this often, the first time this long after the sweep first
   * saw the call paused (the drive that paused it had just asked); it is a read, but of someone
   * else's system. 0 asks on every sweep.
   */
  readonly reconcileEveryMs?: number;
  readonly lastAsked?: Map<string, number>;
  /** Where the previous sweep stopped, per status: each sweep looks at the next page, then wraps. */
  readonly cursors?: Map<string, WaitingCursor>;
}

/**
 * One pass over (a page of) the waiting runs of every tenant: asks the reconcile hooks of paused runs' unknown
 * calls again (at most every `reconcileEveryMs`), and requeues every run nothing holds any more.
 * Returns the number of runs requeued.
 */
export async function sweepWaiting(options: SweepOptions): Promise<number> {
  const { ledger } = options;
  const batch = options.batch ?? 100;
  let requeued = 0;
  const cursors = options.cursors ?? new Map<string, WaitingCursor>();
  for (const status of ['awaiting_reconciliation', 'awaiting_approval'] as const) {
    const page = await ledger.store.runs.listWaiting(status, batch, cursors.get(status));
    const last = page.at(-1);
    if (page.length < batch || last === undefined) cursors.delete(status);
    else cursors.set(status, { at: last.updatedAt, tenantId: last.tenantId, runId: last.runId });
    for (const run of page) {
      if (status === 'awaiting_reconciliation') await askHooks(options, run);
      if (await resumeIfReady(ledger, run.tenantId, run.runId)) requeued += 1;
    }
  }
  return requeued;
}

async function askHooks(options: SweepOptions, run: RunRecord): Promise<void> {
  const every = options.reconcileEveryMs ?? 30_000;
  const asked = options.lastAsked ?? new Map<string, number>();
  if (asked.size > 10_000) asked.clear(); // settled keys are never asked again; forget them now and then
  const { unknown } = await blockersOf(options.ledger, run);
  for (const record of unknown) {
    const tool = options.tools.get(record.toolName);
    const hook = tool === undefined ? undefined : reconcileHookOf(tool);
    if (tool === undefined || hook === undefined) continue;
    const last = asked.get(record.idempotencyKey);
    if (last === undefined && every > 0) {
      // First seen paused: the drive that paused it has just asked; wait a full interval from now.
      asked.set(record.idempotencyKey, Date.now());
      continue;
    }
    if (last !== undefined && Date.now() - last < every) continue;
    asked.set(record.idempotencyKey, Date.now());
    try {
      await reconcileRecord(options.ledger, tool, hook, record);
    } catch (error) {
      process.emitWarning(
        `oncely: reconcile of ${record.idempotencyKey} failed: ${errorInfo(error).message}`,
      );
    }
  }
}
