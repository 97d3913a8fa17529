-- A call's last attempt can no longer land once its deadline (when it started, plus its timeout) and
-- the landing margin have passed; until then it is in flight, not unknown. The list of unknown calls
-- is ordered by that deadline (longest unknown first) and served by one partial index on it, among
-- `started` and `indeterminate` calls: a page is a range of the index that stops at the deadlines not
-- yet passed, so calls in flight are never read to fill it. The deadline is in milliseconds since the
-- epoch, computed from the row's own columns (the attempt's start and timeout), so writes are as
-- they were.
CREATE FUNCTION oncely_deadline_ms(started_at timestamptz, timeout_ms integer) RETURNS bigint
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  -- Immutable indeed: the epoch of a timestamptz does not depend on the session's time zone.
  RETURN (extract(epoch FROM started_at) * 1000)::bigint + COALESCE(timeout_ms, 0);

DROP INDEX tool_executions_unknown;
CREATE INDEX tool_executions_unknown
  ON tool_executions (tenant_id, oncely_deadline_ms(attempt_started_at, attempt_timeout_ms), idempotency_key)
  WHERE status IN ('started', 'indeterminate');
