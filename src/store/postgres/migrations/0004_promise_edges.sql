-- The promise at its edges: how long an attempt may run (so a key is re-opened only once its last
-- attempt can no longer land), conflicts made loud, drive attempts counted per run, model outages
-- retried with backoff, a per-run event sequence that can never skip, and approvals of guarded
-- calls that belong to no run.

ALTER TABLE tool_executions ADD COLUMN attempt_timeout_ms integer CHECK (attempt_timeout_ms >= 0);
ALTER TABLE tool_executions ADD COLUMN conflict_at timestamptz;
CREATE INDEX tool_executions_conflicts
  ON tool_executions (tenant_id, attempt_started_at, idempotency_key) WHERE conflict_at IS NOT NULL;

ALTER TABLE tool_execution_events DROP CONSTRAINT tool_execution_events_kind_check;
ALTER TABLE tool_execution_events ADD CONSTRAINT tool_execution_events_kind_check
  CHECK (kind IN ('transition', 'ignored', 'note', 'conflict'));

ALTER TABLE runs ADD COLUMN drive_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN model_outages integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN last_error jsonb;
ALTER TABLE runs ADD COLUMN event_seq bigint NOT NULL DEFAULT 0;

-- Each run's events are numbered 1, 2, 3… under the run's row lock, so a reader paging by seq can
-- never pass an event that commits late (a bigserial id drawn early can).
ALTER TABLE run_events ADD COLUMN seq bigint;
DROP TRIGGER run_events_append_only ON run_events;
UPDATE run_events e SET seq = n.seq
  FROM (SELECT id, row_number() OVER (PARTITION BY tenant_id, run_id ORDER BY id) AS seq FROM run_events) n
  WHERE e.id = n.id;
CREATE TRIGGER run_events_append_only BEFORE UPDATE OR DELETE ON run_events
  FOR EACH ROW EXECUTE FUNCTION oncely_refuse_change();
ALTER TABLE run_events ALTER COLUMN seq SET NOT NULL;
CREATE UNIQUE INDEX run_events_by_seq ON run_events (tenant_id, run_id, seq);
UPDATE runs r SET event_seq = COALESCE((SELECT max(seq) FROM run_events e
  WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id), 0);

-- A guarded call (executeToolCall) can ask for an approval too; it belongs to no run.
ALTER TABLE approvals DROP CONSTRAINT approvals_tenant_id_run_id_fkey;
