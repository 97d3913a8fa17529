import type Database from 'better-sqlite3';
import type { LedgerStatus, ToolExecutionRecord } from '../../ledger/index.js';
import type { RunStatus } from '../../run-state/index.js';
import type { MonitorStore, StoreStats, UnknownCallFilter } from '../monitor-store.js';
import { UNKNOWN_PREDICATE, toRecord, type ExecutionRow } from '../rows.js';
import { settle } from './settle.js';

/**
 * Unknown: `indeterminate`, or `started` with no live lease on its run (no run row, or a lease that is
 * unset or expired). The status test is written as the partial index `tool_executions_unknown` is.
 */
const UNKNOWN_FROM = `
FROM tool_executions t
LEFT JOIN runs r ON r.tenant_id = t.tenant_id AND r.run_id = t.run_id
WHERE t.${UNKNOWN_PREDICATE}
  AND (t.status = 'indeterminate' OR r.lease_expires_at IS NULL OR r.lease_expires_at <= @now)`;

const UNKNOWN_CALLS = `
SELECT t.* ${UNKNOWN_FROM}
  AND t.tenant_id = @tenantId
  AND (@runId IS NULL OR t.run_id = @runId)
  AND (@toolName IS NULL OR t.tool_name = @toolName)
  AND (@afterAt IS NULL OR (t.attempt_started_at, t.idempotency_key) > (@afterAt, @afterKey))
ORDER BY t.attempt_started_at, t.idempotency_key LIMIT @limit`;

const UNKNOWN_BY_TENANT = `
SELECT t.tenant_id AS tenant_id, COUNT(*) AS n, MIN(t.attempt_started_at) AS oldest ${UNKNOWN_FROM}
GROUP BY t.tenant_id`;
const CALLS_BY_TOOL = `SELECT tool_name, status, COUNT(*) AS n FROM tool_executions GROUP BY tool_name, status`;
const RUNS_BY_STATUS = `SELECT status, COUNT(*) AS n FROM runs GROUP BY status`;

/** Operators' and metrics' views on one better-sqlite3 connection. */
export class SqliteMonitor implements MonitorStore {
  constructor(private readonly db: Database.Database) {}

  unknownCalls(tenantId: string, filter: UnknownCallFilter): Promise<ToolExecutionRecord[]> {
    return settle(() =>
      this.db
        .prepare<[Record<string, unknown>], ExecutionRow>(UNKNOWN_CALLS)
        .all({
          tenantId,
          now: new Date().toISOString(),
          runId: filter.runId ?? null,
          toolName: filter.toolName ?? null,
          afterAt: filter.after?.at ?? null,
          afterKey: filter.after?.key ?? null,
          limit: filter.limit,
        })
        .map(toRecord),
    );
  }

  stats(): Promise<StoreStats> {
    return settle(() => {
      const now = new Date().toISOString();
      const calls = this.db
        .prepare<[], { tool_name: string; status: string; n: number }>(CALLS_BY_TOOL)
        .all()
        .map((r) => ({ toolName: r.tool_name, status: r.status as LedgerStatus, count: r.n }));
      const runs = this.db
        .prepare<[], { status: string; n: number }>(RUNS_BY_STATUS)
        .all()
        .map((r) => ({ status: r.status as RunStatus, count: r.n }));
      const unknown = this.db
        .prepare<[{ now: string }], { tenant_id: string; n: number; oldest: string }>(UNKNOWN_BY_TENANT)
        .all({ now })
        .map((r) => ({ tenantId: r.tenant_id, count: r.n, oldestStartedAt: r.oldest }));
      const conflicts = this.db
        .prepare<[], { tenant_id: string; n: number }>(
          'SELECT tenant_id, COUNT(*) AS n FROM tool_executions WHERE conflict_at IS NOT NULL GROUP BY tenant_id',
        )
        .all()
        .map((r) => ({ tenantId: r.tenant_id, count: r.n }));
      return { calls, runs, unknown, conflicts };
    });
  }
}
