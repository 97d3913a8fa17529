import type { LedgerStatus, ToolExecutionRecord } from '../ledger/index.js';
import type { RunStatus } from '../run-state/index.js';
import type { ListCursor } from './ledger-store.js';

export interface UnknownCallFilter {
  readonly runId?: string;
  readonly toolName?: string;
  readonly limit: number;
  /** How long after its deadline an attempt may still land (the ledger's `landingMarginMs`). */
  readonly marginMs: number;
  /**
   * Records strictly after this position in (deadline, idempotencyKey) order: `at` is the deadline of
   * the last attempt (`attemptDeadline`), as an ISO time.
   */
  readonly after?: ListCursor;
}

/** A position in the order of every tenant's unknown calls: the deadline of the last attempt (ISO), tenant, key. */
export interface UnknownCallPosition {
  readonly at: string;
  readonly tenantId: string;
  readonly key: string;
}

/** An unknown call of any tenant, with the status of its run (null: a call of no run). */
export interface UnknownCallOfRun {
  readonly record: ToolExecutionRecord;
  readonly runStatus: RunStatus | null;
}

/** Counts over the whole database, for `/metrics`. */
export interface StoreStats {
  readonly calls: readonly {
    readonly toolName: string;
    readonly status: LedgerStatus;
    readonly count: number;
  }[];
  readonly runs: readonly { readonly status: RunStatus; readonly count: number }[];
  /** Per tenant with at least one unknown call: how many, and since when the oldest has waited. */
  readonly unknown: readonly {
    readonly tenantId: string;
    readonly count: number;
    readonly oldestStartedAt: string;
  }[];
  /** Per tenant with any: calls a real outcome contradicted after they were settled (never goes down). */
  readonly conflicts: readonly { readonly tenantId: string; readonly count: number }[];
}

/** Read-only views across the ledger and the runs, for operators and metrics. */
export interface MonitorStore {
  /**
   * A tenant's unknown calls (`isUnknownCall`), longest unknown first (by the deadline of their last
   * attempt): `started` or `indeterminate` calls whose last attempt can no longer land (its deadline
   * and the margin have passed), a `started` one only when no live driver holds its run. Calls in
   * flight are not read to fill a page: a page is a range of the index on the deadline.
   */
  unknownCalls(tenantId: string, filter: UnknownCallFilter): Promise<ToolExecutionRecord[]>;
  /**
   * Every tenant's unknown calls, as `unknownCalls` defines them, of runs no driver is about to
   * replay (not `queued` or `running`: waiting, ended, cancelled) and of no run, longest unknown
   * first (by the deadline of their last attempt, then tenant and key), strictly after `after`: a
   * page of the index `tool_executions_unknown_all`. What the reconcile sweep reads.
   */
  unknownCallsOfAllTenants(filter: {
    readonly limit: number;
    readonly marginMs: number;
    readonly after?: UnknownCallPosition;
  }): Promise<UnknownCallOfRun[]>;
  /** Counts for `/metrics`; unknown calls as `unknownCalls` defines them, with this margin. */
  stats(options: { readonly marginMs: number }): Promise<StoreStats>;
}
