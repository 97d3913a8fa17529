import type { Ledger } from '../calls/index.js';
import { isUnknownStatus, type ToolExecutionRecord } from '../ledger/index.js';
import type { PendingCall, RunSummary } from '../run-state/index.js';
import type { WaitingCursor, WaitingRun } from '../store/index.js';

/** What a waiting run still waits for: unknown calls, or approvals not yet decided. */
export interface Blockers {
  readonly unknown: readonly ToolExecutionRecord[];
  readonly undecided: readonly string[];
}

/** A waiting run as the sweep reads it, or a whole run record. */
type Waiting = WaitingRun | RunSummary;

function unheard(run: Waiting): readonly PendingCall[] {
  const pending = 'checkpoint' in run ? run.checkpoint.pending : run.pending;
  return (pending?.calls ?? []).filter((c) => c.heard === undefined);
}

type WaitingStatus = 'awaiting_reconciliation' | 'awaiting_approval';

function isWaiting(status: string): status is WaitingStatus {
  return status === 'awaiting_reconciliation' || status === 'awaiting_approval';
}

const NOTHING: Blockers = { unknown: [], undecided: [] };

const holds = (blockers: Blockers): boolean => blockers.unknown.length > 0 || blockers.undecided.length > 0;

/** Reads what holds a waiting run: its unknown calls (`awaiting_reconciliation`) or undecided approvals. */
export async function blockersOf(ledger: Ledger, run: Waiting): Promise<Blockers> {
  if (!isWaiting(run.status)) return NOTHING;
  return (await blockersOfPage(ledger, run.status, [run])).get(run) ?? NOTHING;
}

/** Requeues a run nothing holds any more, compare-and-set on its waiting status. True when this call did. */
function requeueFreed(ledger: Ledger, run: Waiting, status: WaitingStatus): Promise<boolean> {
  const reason =
    status === 'awaiting_reconciliation' ? 'every unknown call is settled' : 'every approval is decided';
  return ledger.store.runs.requeue(run.tenantId, run.runId, [status], reason);
}

/**
 * Puts a waiting run back in the queue once nothing holds it: every unknown call settled (by the
 * reconcile hook, an operator, a late outcome), or every approval decided. Compare-and-set on the
 * status, so of several processes noticing at once one requeues it. True when this call did.
 */
export async function resumeIfReady(ledger: Ledger, tenantId: string, runId: string): Promise<boolean> {
  const run = await ledger.store.runs.summary(tenantId, runId);
  if (run === undefined || !isWaiting(run.status)) return false;
  if (holds(await blockersOf(ledger, run))) return false;
  return requeueFreed(ledger, run, run.status);
}

export interface SweepOptions {
  readonly ledger: Ledger;
  /** Runs looked at per status and sweep. */
  readonly batch?: number;
  /** Where the previous sweep stopped, per status: each sweep looks at the next page, then wraps. */
  readonly cursors?: Map<string, WaitingCursor>;
}

/**
 * One pass over (a page of) the waiting runs of every tenant: requeues every run nothing holds any
 * more (its unknown calls settled by a hook, an operator or a late outcome; its approvals decided).
 * The hooks themselves are asked by the reconcile sweep (`reconcileUnknownCalls`), for every unknown
 * call whatever its run's status. Returns the number of runs requeued. A page is read in bulk: the
 * page, the records of all its runs' pending calls and their approvals in three reads, then a
 * compare-and-set requeue of each run nothing holds (on its waiting status: a run that moved on
 * meanwhile is left alone).
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
    const blockers = await blockersOfPage(ledger, status, page);
    for (const run of page) {
      if (!holds(blockers.get(run) ?? NOTHING) && (await requeueFreed(ledger, run, status))) requeued += 1;
    }
  }
  return requeued;
}

/** A key with its tenant, as one map key. */
const keyIn = (tenantId: string, key: string): string => `${tenantId}\u0000${key}`;

/** What holds each run of a page of one waiting status, read in one statement for the page. */
async function blockersOfPage(
  ledger: Ledger,
  status: WaitingStatus,
  page: readonly Waiting[],
): Promise<Map<Waiting, Blockers>> {
  // A repeat waits for the earlier call it repeats (`waitsFor`), perhaps of another run.
  const keysOf = (run: Waiting): string[] =>
    unheard(run).flatMap((c) => [
      `${run.runId}:${c.toolCallId}`,
      ...(c.waitsFor === undefined ? [] : [c.waitsFor]),
    ]);
  const held = new Map<Waiting, Blockers>();
  if (status === 'awaiting_reconciliation') {
    const records = await ledger.store.ledger.getMany(
      page.flatMap((run) =>
        keysOf(run).map((idempotencyKey) => ({ tenantId: run.tenantId, idempotencyKey })),
      ),
    );
    const byKey = new Map(records.map((r) => [keyIn(r.tenantId, r.idempotencyKey), r]));
    for (const run of page) {
      const unknown = keysOf(run)
        .map((key) => byKey.get(keyIn(run.tenantId, key)))
        .filter((r): r is ToolExecutionRecord => r !== undefined && isUnknownStatus(r.status));
      held.set(run, { unknown, undecided: [] });
    }
    return held;
  }
  const approvals = await ledger.store.runs.approvalsOfRuns(page);
  const pending = new Set(
    approvals.filter((a) => a.status === 'pending').map((a) => keyIn(a.tenantId, a.idempotencyKey)),
  );
  for (const run of page) {
    const undecided = keysOf(run).filter((key) => pending.has(keyIn(run.tenantId, key)));
    held.set(run, { unknown: [], undecided });
  }
  return held;
}
