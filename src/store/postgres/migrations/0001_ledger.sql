-- The tool-execution ledger: one record per (tenant_id, idempotency_key), and its append-only history.

-- Times are kept to the millisecond, so a time read back into JavaScript compares equal to the stored one
-- (list cursors depend on it).
CREATE FUNCTION oncely_now() RETURNS timestamptz LANGUAGE sql VOLATILE AS
  $$ SELECT date_trunc('milliseconds', clock_timestamp()) $$;

CREATE TABLE tool_executions (
  tenant_id          text        NOT NULL,
  idempotency_key    text        NOT NULL,
  run_id             text        NOT NULL,
  tool_call_id       text        NOT NULL,
  tool_name          text        NOT NULL,
  effect             text        NOT NULL CHECK (effect IN ('read', 'write', 'external', 'destructive')),
  args               jsonb       NOT NULL,
  args_digest        text        NOT NULL,
  status             text        NOT NULL CHECK (status IN ('started', 'completed', 'failed', 'indeterminate', 'compensated')),
  attempt            integer     NOT NULL CHECK (attempt >= 1),
  version            bigint      NOT NULL CHECK (version >= 1),
  result             jsonb,
  result_reference   text,
  error              jsonb,
  compensation_of    text,
  created_at         timestamptz NOT NULL DEFAULT oncely_now(),
  updated_at         timestamptz NOT NULL DEFAULT oncely_now(),
  attempt_started_at timestamptz NOT NULL DEFAULT oncely_now(),
  settled_at         timestamptz,
  settled_by_kind    text,
  settled_by_id      text,
  PRIMARY KEY (tenant_id, idempotency_key)
);

-- "A tenant's unknown calls, longest waiting first."
CREATE INDEX tool_executions_unknown
  ON tool_executions (tenant_id, attempt_started_at, idempotency_key)
  WHERE status IN ('started', 'indeterminate');
CREATE INDEX tool_executions_by_run ON tool_executions (tenant_id, run_id);
CREATE INDEX tool_executions_by_time ON tool_executions (tenant_id, attempt_started_at, idempotency_key);

CREATE TABLE tool_execution_events (
  id              bigserial   PRIMARY KEY,
  tenant_id       text        NOT NULL,
  idempotency_key text        NOT NULL,
  at              timestamptz NOT NULL DEFAULT oncely_now(),
  kind            text        NOT NULL CHECK (kind IN ('transition', 'ignored', 'note')),
  actor_kind      text        NOT NULL CHECK (actor_kind IN ('runtime', 'reconcile', 'operator')),
  actor_id        text        NOT NULL,
  via             text,
  from_status     text,
  to_status       text,
  attempt         integer     NOT NULL,
  reason          text,
  detail          jsonb,
  FOREIGN KEY (tenant_id, idempotency_key) REFERENCES tool_executions (tenant_id, idempotency_key)
);
CREATE INDEX tool_execution_events_by_key ON tool_execution_events (tenant_id, idempotency_key, id);

-- Nothing in the ledger is ever deleted; history is never rewritten.
CREATE FUNCTION oncely_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP;
END;
$$;
CREATE TRIGGER tool_execution_events_append_only BEFORE UPDATE OR DELETE ON tool_execution_events
  FOR EACH ROW EXECUTE FUNCTION oncely_refuse_change();
CREATE TRIGGER tool_executions_no_delete BEFORE DELETE ON tool_executions
  FOR EACH ROW EXECUTE FUNCTION oncely_refuse_change();
