-- The reconcile sweep asks the hooks of every tenant's unknown calls, whatever their run's status,
-- longest unknown first: a page in (deadline, tenant_id, idempotency_key) order, served by one partial
-- index on exactly that (see the PostgreSQL migration).
CREATE INDEX tool_executions_unknown_all
  ON tool_executions (
    CAST(round(unixepoch(attempt_started_at, 'subsec') * 1000) AS INTEGER) + COALESCE(attempt_timeout_ms, 0),
    tenant_id,
    idempotency_key)
  WHERE status IN ('started', 'indeterminate');
