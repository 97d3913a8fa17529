-- The reconcile sweep asks the hooks of every tenant's unknown calls, whatever their run's status,
-- longest unknown first: a page in (deadline, tenant_id, idempotency_key) order, served by one partial
-- index on exactly that among `started` and `indeterminate` calls (the per-tenant list keeps
-- `tool_executions_unknown`). A page is a range of it that stops at the first deadline not yet passed.
CREATE INDEX tool_executions_unknown_all
  ON tool_executions (oncely_deadline_ms(attempt_started_at, attempt_timeout_ms), tenant_id, idempotency_key)
  WHERE status IN ('started', 'indeterminate');
