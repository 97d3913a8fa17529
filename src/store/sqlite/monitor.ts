import type Database from 'better-sqlite3';
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
import type { Clock } from '../../util/clock.js';
import { settle } from './settle.js';

/** Operators' and metrics' views on one better-sqlite3 connection. */
export class SqliteMonitor implements MonitorStore {
  constructor(
    private readonly db: Database.Database,
    private readonly clock: Clock,
  ) {}

  unknownCalls(tenantId: string, filter: UnknownCallFilter): Promise<ToolExecutionRecord[]> {
    return settle(() =>
      this.db
        .prepare<[Record<string, unknown>], ExecutionRow>(UNKNOWN_CALLS.sqlite)
        .all({
          tenantId,
          ...knownBy(this.clock.now(), filter.marginMs),
          runId: filter.runId ?? null,
          toolName: filter.toolName ?? null,
          afterAt: filter.after === undefined ? null : Date.parse(filter.after.at),
          afterKey: filter.after?.key ?? null,
          limit: filter.limit,
        })
        .map(toRecord),
    );
  }

  unknownCallsOfAllTenants(filter: {
    readonly limit: number;
    readonly marginMs: number;
    readonly after?: UnknownCallPosition;
  }): Promise<UnknownCallOfRun[]> {
    return settle(() =>
      this.db
        .prepare<[Record<string, unknown>], ExecutionRow & { run_status: string | null }>(
          UNKNOWN_CALLS_OF_ALL_TENANTS.sqlite,
        )
        .all({
          ...knownBy(this.clock.now(), filter.marginMs),
          afterAt: filter.after === undefined ? null : Date.parse(filter.after.at),
          afterTenant: filter.after?.tenantId ?? null,
          afterKey: filter.after?.key ?? null,
          limit: filter.limit,
        })
        .map((row) => ({ record: toRecord(row), runStatus: row.run_status as RunStatus | null })),
    );
  }

  stats(options: { readonly marginMs: number }): Promise<StoreStats> {
    return settle(() => {
      const at = knownBy(this.clock.now(), options.marginMs);
      const calls = this.db
        .prepare<[], { tool_name: string; status: string; n: number }>(CALLS_BY_TOOL)
        .all()
        .map((r) => ({ toolName: r.tool_name, status: r.status as LedgerStatus, count: r.n }));
      const runs = this.db
        .prepare<[], { status: string; n: number }>(RUNS_BY_STATUS)
        .all()
        .map((r) => ({ status: r.status as RunStatus, count: r.n }));
      const unknown = this.db
        .prepare<[{ now: string; knownBy: number }], { tenant_id: string; n: number; oldest: string }>(
          UNKNOWN_BY_TENANT.sqlite,
        )
        .all(at)
        .map((r) => ({ tenantId: r.tenant_id, count: r.n, oldestStartedAt: r.oldest }));
      const conflicts = this.db
        .prepare<[], { tenant_id: string; n: number }>(CONFLICTS_BY_TENANT)
        .all()
        .map((r) => ({ tenantId: r.tenant_id, count: r.n }));
      return { calls, runs, unknown, conflicts };
    });
  }
}

/** Now, and the latest deadline an attempt can have and be unknown (now less the margin, in ms). */
function knownBy(now: number, marginMs: number): { now: string; knownBy: number } {
  return { now: new Date(now).toISOString(), knownBy: now - Math.max(0, Math.round(marginMs)) };
}
