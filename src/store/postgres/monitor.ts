import type { LedgerStatus, ToolExecutionRecord } from '../../ledger/index.js';
import type { RunStatus } from '../../run-state/index.js';
import type {
  MonitorStore,
  StoreStats,
  UnknownCallFilter,
  UnknownCallOfRun,
  UnknownCallPosition,
} from '../monitor-store.js';
import { toRecord, type ExecutionRow } from '../rows.js';
import {
  CALLS_BY_TOOL,
  CONFLICTS_BY_TENANT,
  RUNS_BY_STATUS,
  UNKNOWN_BY_TENANT,
  UNKNOWN_CALLS,
  UNKNOWN_CALLS_OF_ALL_TENANTS,
} from '../monitor-sql.js';
import type { Queryable } from './ledger.js';

/** Operators' and metrics' views on PostgreSQL. */
export class PostgresMonitor implements MonitorStore {
  constructor(private readonly db: Queryable) {}

  async unknownCalls(tenantId: string, filter: UnknownCallFilter): Promise<ToolExecutionRecord[]> {
    const { rows } = await this.db.query<ExecutionRow>(UNKNOWN_CALLS.postgres, [
      tenantId,
      filter.runId ?? null,
      filter.toolName ?? null,
      filter.after === undefined ? null : Date.parse(filter.after.at),
      filter.after?.key ?? null,
      filter.limit,
      Math.max(0, Math.round(filter.marginMs)),
    ]);
    return rows.map(toRecord);
  }

  async unknownCallsOfAllTenants(filter: {
    readonly limit: number;
    readonly marginMs: number;
    readonly after?: UnknownCallPosition;
  }): Promise<UnknownCallOfRun[]> {
    const { rows } = await this.db.query<ExecutionRow & { run_status: string | null }>(
      UNKNOWN_CALLS_OF_ALL_TENANTS.postgres,
      [
        Math.max(0, Math.round(filter.marginMs)),
        filter.after === undefined ? null : Date.parse(filter.after.at),
        filter.after?.tenantId ?? null,
        filter.after?.key ?? null,
        filter.limit,
      ],
    );
    return rows.map((row) => ({ record: toRecord(row), runStatus: row.run_status as RunStatus | null }));
  }

  async stats(options: { readonly marginMs: number }): Promise<StoreStats> {
    const [calls, runs, unknown, conflicts] = await Promise.all([
      this.db.query<{ tool_name: string; status: string; n: string }>(CALLS_BY_TOOL),
      this.db.query<{ status: string; n: string }>(RUNS_BY_STATUS),
      this.db.query<{ tenant_id: string; n: string; oldest: Date }>(UNKNOWN_BY_TENANT.postgres, [
        Math.max(0, Math.round(options.marginMs)),
      ]),
      this.db.query<{ tenant_id: string; n: string }>(CONFLICTS_BY_TENANT),
    ]);
    return {
      calls: calls.rows.map((r) => ({
        toolName: r.tool_name,
        status: r.status as LedgerStatus,
        count: Number(r.n),
      })),
      runs: runs.rows.map((r) => ({ status: r.status as RunStatus, count: Number(r.n) })),
      unknown: unknown.rows.map((r) => ({
        tenantId: r.tenant_id,
        count: Number(r.n),
        oldestStartedAt: r.oldest.toISOString(),
      })),
      conflicts: conflicts.rows.map((r) => ({ tenantId: r.tenant_id, count: Number(r.n) })),
    };
  }
}
