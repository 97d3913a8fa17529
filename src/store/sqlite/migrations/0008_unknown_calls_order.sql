-- The unknown calls are ordered by their last attempt's deadline (see the PostgreSQL migration), in
-- milliseconds since the epoch, and served by one partial index on it.
DROP INDEX tool_executions_unknown;
CREATE INDEX tool_executions_unknown
  ON tool_executions (tenant_id,
    CAST(round(unixepoch(attempt_started_at, 'subsec') * 1000) AS INTEGER) + COALESCE(attempt_timeout_ms, 0),
    idempotency_key)
  WHERE status IN ('started', 'indeterminate');
