-- A tenant's unknown calls are read from tool_executions_unknown_all (deadline, tenant_id,
-- idempotency_key) with the tenant fixed, in the same order: a page is still a range that stops at the
-- first deadline not yet passed, so calls in flight are not read; unknown calls of other tenants in
-- the range are passed over. One partial index fewer to write as every call is reserved and settled
-- (two pages a guarded call).
DROP INDEX IF EXISTS tool_executions_unknown;
