import type { LedgerStatus, ToolExecutionRecord } from '../../ledger/index.js';
import type { RunStatus } from '../../run-state/index.js';
import type { MonitorStore, StoreStats, UnknownCallFilter } from '../monitor-store.js';
import { UNKNOWN_PREDICATE, toRecord, type ExecutionRow } from '../rows.js';
import type { Queryable } from './ledger.js';

/** The deadline of a call's last attempt, in ms since the epoch, as the index `tool_executions_unknown` has it. */
const DEADLINE = 'oncely_deadline_ms(t.attempt_started_at, t.attempt_timeout_ms)';

/**
 * Unknown (see `isUnknownCall`): `started` or `indeterminate`, the last attempt's deadline and the
 * margin ($margin, ms) passed, and a `started` one with no live lease on its run (no run row, or a
 * lease unset or expired; a compensation is driven by no run). The time is the statement's (stable
 * within it, unlike oncely_now()), so the deadline's bound is a condition of the index scan itself. Written as the partial index `tool_executions_unknown` is (schema 0008),
 * whose range on the deadline leaves out the calls still in flight by their time.
 */
function unknownFrom(margin: string): string {
  return `
FROM tool_executions t
LEFT JOIN runs r ON r.tenant_id = t.tenant_id AND r.run_id = t.run_id
WHERE t.${UNKNOWN_PREDICATE}
  AND ${DEADLINE} <= (extract(epoch FROM statement_timestamp()) * 1000)::bigint - ${margin}::bigint
  AND (t.status = 'indeterminate' OR t.compensation_of IS NOT NULL OR r.lease_expires_at IS NULL OR r.lease_expires_at <= oncely_now())`;
}

export const UNKNOWN_CALLS = `
SELECT t.* ${unknownFrom('$7')}
  AND t.tenant_id = $1
  AND ($2::text IS NULL OR t.run_id = $2)
  AND ($3::text IS NULL OR t.tool_name = $3)
  AND ($4::bigint IS NULL OR (${DEADLINE}, t.idempotency_key) > ($4::bigint, $5::text))
ORDER BY ${DEADLINE}, t.idempotency_key LIMIT $6`;

const UNKNOWN_BY_TENANT = `
SELECT t.tenant_id AS tenant_id, COUNT(*) AS n, MIN(t.attempt_started_at) AS oldest ${unknownFrom('$1')}
GROUP BY t.tenant_id`;
const CALLS_BY_TOOL = `SELECT tool_name, status, COUNT(*) AS n FROM tool_executions GROUP BY tool_name, status`;
const RUNS_BY_STATUS = `SELECT status, COUNT(*) AS n FROM runs GROUP BY status`;
const CONFLICTS_BY_TENANT = `SELECT tenant_id, COUNT(*) AS n FROM tool_executions WHERE conflict_at IS NOT NULL GROUP BY tenant_id`;

/** Operators' and metrics' views on PostgreSQL. */
export class PostgresMonitor implements MonitorStore {
  constructor(private readonly db: Queryable) {}

  async unknownCalls(tenantId: string, filter: UnknownCallFilter): Promise<ToolExecutionRecord[]> {
    const { rows } = await this.db.query<ExecutionRow>(UNKNOWN_CALLS, [
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

  async stats(options: { readonly marginMs: number }): Promise<StoreStats> {
    const [calls, runs, unknown, conflicts] = await Promise.all([
      this.db.query<{ tool_name: string; status: string; n: string }>(CALLS_BY_TOOL),
      this.db.query<{ status: string; n: string }>(RUNS_BY_STATUS),
      this.db.query<{ tenant_id: string; n: string; oldest: Date }>(UNKNOWN_BY_TENANT, [
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
