import type Database from 'better-sqlite3';
import type { LedgerStatus, ToolExecutionRecord } from '../../ledger/index.js';
import type { RunStatus } from '../../run-state/index.js';
import type { MonitorStore, StoreStats, UnknownCallFilter } from '../monitor-store.js';
import { UNKNOWN_PREDICATE, toRecord, type ExecutionRow } from '../rows.js';
import { settle } from './settle.js';

/** The deadline of a call's last attempt, in ms since the epoch, exactly as the index `tool_executions_unknown` has it. */
const DEADLINE =
  "CAST(round(unixepoch(t.attempt_started_at, 'subsec') * 1000) AS INTEGER) + COALESCE(t.attempt_timeout_ms, 0)";

/**
 * Unknown (see `isUnknownCall`; the PostgreSQL store's definition): `started` or `indeterminate`, the
 * last attempt's deadline before @knownBy (now less the margin), and a `started` one with no live
 * lease on its run. Written as the partial index `tool_executions_unknown` is (schema 0008).
 */
const UNKNOWN_FROM = `
FROM tool_executions t
LEFT JOIN runs r ON r.tenant_id = t.tenant_id AND r.run_id = t.run_id
WHERE t.${UNKNOWN_PREDICATE}
  AND ${DEADLINE} <= @knownBy
  AND (t.status = 'indeterminate' OR t.compensation_of IS NOT NULL OR r.lease_expires_at IS NULL OR r.lease_expires_at <= @now)`;

const UNKNOWN_CALLS = `
SELECT t.* ${UNKNOWN_FROM}
  AND t.tenant_id = @tenantId
  AND (@runId IS NULL OR t.run_id = @runId)
  AND (@toolName IS NULL OR t.tool_name = @toolName)
  AND (@afterAt IS NULL OR (${DEADLINE}, t.idempotency_key) > (@afterAt, @afterKey))
ORDER BY ${DEADLINE}, t.idempotency_key LIMIT @limit`;

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
          ...knownBy(filter.marginMs),
          runId: filter.runId ?? null,
          toolName: filter.toolName ?? null,
          afterAt: filter.after === undefined ? null : Date.parse(filter.after.at),
          afterKey: filter.after?.key ?? null,
          limit: filter.limit,
        })
        .map(toRecord),
    );
  }

  stats(options: { readonly marginMs: number }): Promise<StoreStats> {
    return settle(() => {
      const at = knownBy(options.marginMs);
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
          UNKNOWN_BY_TENANT,
        )
        .all(at)
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

/** Now, and the latest deadline an attempt can have and be unknown (now less the margin, in ms). */
function knownBy(marginMs: number): { now: string; knownBy: number } {
  const now = Date.now();
  return { now: new Date(now).toISOString(), knownBy: now - Math.max(0, Math.round(marginMs)) };
}
