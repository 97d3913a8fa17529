import type { LedgerStatus, ToolExecutionRecord } from '../ledger/index.js';
import type { RunStatus } from '../run-state/index.js';
import type { ListCursor } from './store.js';

export interface UnknownCallFilter {
  readonly runId?: string;
  readonly toolName?: string;
  readonly limit: number;
  /** Records strictly after this position in (attemptStartedAt, idempotencyKey) order. */
  readonly after?: ListCursor;
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
   * A tenant's unknown calls, longest waiting first: every `indeterminate` call, and every `started`
   * call whose run no live driver holds (no run, or its lease is unset or expired). A `started` call
   * under a live lease is in flight, not unknown.
   */
  unknownCalls(tenantId: string, filter: UnknownCallFilter): Promise<ToolExecutionRecord[]>;
  stats(): Promise<StoreStats>;
}
