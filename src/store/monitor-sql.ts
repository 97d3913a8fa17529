import type { StoreDialect } from './store.js';
import { UNKNOWN_PREDICATE } from './rows.js';

/*
 * The monitor's SQL (the unknown-calls list and the counts behind /metrics), both dialects from one
 * definition. "Unknown" is `isUnknownCall` (ledger) said in SQL: `started` or `indeterminate`, the
 * last attempt's deadline and the landing margin passed, and a `started` call of a run (not a
 * compensation, which no run drives) only when no live lease holds the run. The status test is
 * written as the partial index `tool_executions_unknown` is, and the deadline as the index has it
 * (schema 0008), so a page is a range of the index that ends at the first deadline not yet passed.
 * SQLite has only `tool_executions_unknown_all` (schema 0016): a tenant's page is a range of it with
 * the tenant fixed, so its order and cursor name the tenant between the deadline and the key.
 */

/** What differs between the dialects: the deadline expression, the bound on it, and the time now. */
const DIALECT = {
  postgres: {
    deadline: 'oncely_deadline_ms(t.attempt_started_at, t.attempt_timeout_ms)',
    // The statement's time (stable within it, unlike oncely_now()), so the bound is an index condition.
    knownBy: (margin: string) =>
      `(extract(epoch FROM statement_timestamp()) * 1000)::bigint - ${margin}::bigint`,
    now: 'oncely_now()',
  },
  sqlite: {
    deadline:
      "CAST(round(unixepoch(t.attempt_started_at, 'subsec') * 1000) AS INTEGER) + COALESCE(t.attempt_timeout_ms, 0)",
    // Now less the margin, in ms, bound by the caller.
    knownBy: () => '@knownBy',
    now: '@now',
  },
} as const;

function unknownFrom(dialect: StoreDialect, margin: string): string {
  const d = DIALECT[dialect];
  return `
FROM tool_executions t
LEFT JOIN runs r ON r.tenant_id = t.tenant_id AND r.run_id = t.run_id
WHERE t.${UNKNOWN_PREDICATE}
  AND ${d.deadline} <= ${d.knownBy(margin)}
  AND (t.status = 'indeterminate' OR t.compensation_of IS NOT NULL OR r.lease_expires_at IS NULL OR r.lease_expires_at <= ${d.now})`;
}

/** A page of a tenant's unknown calls, longest unknown first, after a (deadline, key) cursor. */
export const UNKNOWN_CALLS = {
  postgres: `
SELECT t.* ${unknownFrom('postgres', '$7')}
  AND t.tenant_id = $1
  AND ($2::text IS NULL OR t.run_id = $2)
  AND ($3::text IS NULL OR t.tool_name = $3)
  AND ($4::bigint IS NULL OR (${DIALECT.postgres.deadline}, t.idempotency_key) > ($4::bigint, $5::text))
ORDER BY ${DIALECT.postgres.deadline}, t.idempotency_key LIMIT $6`,
  sqlite: `
SELECT t.* ${unknownFrom('sqlite', '')}
  AND t.tenant_id = @tenantId
  AND (@runId IS NULL OR t.run_id = @runId)
  AND (@toolName IS NULL OR t.tool_name = @toolName)
  AND (@afterAt IS NULL OR (${DIALECT.sqlite.deadline}, t.tenant_id, t.idempotency_key) > (@afterAt, @tenantId, @afterKey))
ORDER BY ${DIALECT.sqlite.deadline}, t.tenant_id, t.idempotency_key LIMIT @limit`,
} as const;

/**
 * A page of every tenant's unknown calls, longest unknown first, after a (deadline, tenant, key)
 * cursor, each with its run's status (null for a call of no run): what the reconcile sweep asks the
 * hooks of — calls of runs that wait, ended or were cancelled. Calls of a `queued` or `running` run
 * are left to its driver, which asks the hook itself when it replays the call. Served by `tool_executions_unknown_all` (schema 0015 on
 * PostgreSQL, 0013 on SQLite): a page is a range of it that ends at the first deadline not yet passed.
 */
export const UNKNOWN_CALLS_OF_ALL_TENANTS = {
  postgres: `
SELECT t.*, r.status AS run_status ${unknownFrom('postgres', '$1')}
  AND (r.status IS NULL OR r.status NOT IN ('queued', 'running'))
  AND ($2::bigint IS NULL OR (${DIALECT.postgres.deadline}, t.tenant_id, t.idempotency_key) > ($2::bigint, $3::text, $4::text))
ORDER BY ${DIALECT.postgres.deadline}, t.tenant_id, t.idempotency_key LIMIT $5`,
  sqlite: `
SELECT t.*, r.status AS run_status ${unknownFrom('sqlite', '')}
  AND (r.status IS NULL OR r.status NOT IN ('queued', 'running'))
  AND (@afterAt IS NULL OR (${DIALECT.sqlite.deadline}, t.tenant_id, t.idempotency_key) > (@afterAt, @afterTenant, @afterKey))
ORDER BY ${DIALECT.sqlite.deadline}, t.tenant_id, t.idempotency_key LIMIT @limit`,
} as const;

/**
 * Per tenant with any: how many unknown calls, and when the oldest one's attempt started. On
 * PostgreSQL the run's lease is looked up by primary key for each `started` call the index gives (a
 * subquery), the same test as `unknownFrom`'s join: planned as a join, it hashed every run (0.66 s
 * over 300,000 runs for 5,000 unknown calls; 7 ms so).
 */
export const UNKNOWN_BY_TENANT = {
  postgres: `
SELECT t.tenant_id AS tenant_id, COUNT(*) AS n, MIN(t.attempt_started_at) AS oldest
FROM tool_executions t
WHERE t.${UNKNOWN_PREDICATE}
  AND ${DIALECT.postgres.deadline} <= ${DIALECT.postgres.knownBy('$1')}
  AND (t.status = 'indeterminate' OR t.compensation_of IS NOT NULL OR COALESCE((
    SELECT r.lease_expires_at FROM runs r WHERE r.tenant_id = t.tenant_id AND r.run_id = t.run_id
  ) <= ${DIALECT.postgres.now}, true))
GROUP BY t.tenant_id`,
  sqlite: `
SELECT t.tenant_id AS tenant_id, COUNT(*) AS n, MIN(t.attempt_started_at) AS oldest ${unknownFrom('sqlite', '')}
GROUP BY t.tenant_id`,
} as const;

/*
 * Calls by tool and status, runs by status: the counts the schema's triggers keep as the writes
 * happen (PostgreSQL 0017, SQLite 0015), summed over their shards, a read of a few hundred rows
 * whatever the size of the ledger. A count that came back to zero is left out, as a GROUP BY over
 * the rows would. The same text in both dialects.
 */
export const CALLS_BY_TOOL = `SELECT tool_name, status, SUM(n) AS n FROM tool_call_counts
GROUP BY tool_name, status HAVING SUM(n) <> 0`;
export const RUNS_BY_STATUS = 'SELECT status, SUM(n) AS n FROM run_counts GROUP BY status HAVING SUM(n) <> 0';
export const CONFLICTS_BY_TENANT =
  'SELECT tenant_id, COUNT(*) AS n FROM tool_executions WHERE conflict_at IS NOT NULL GROUP BY tenant_id';
