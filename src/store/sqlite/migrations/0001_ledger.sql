-- The tool-execution ledger: one record per (tenant_id, idempotency_key), and its append-only history.
CREATE TABLE tool_executions (
  tenant_id          TEXT    NOT NULL,
  idempotency_key    TEXT    NOT NULL,
  run_id             TEXT    NOT NULL,
  tool_call_id       TEXT    NOT NULL,
  tool_name          TEXT    NOT NULL,
  effect             TEXT    NOT NULL CHECK (effect IN ('read', 'write', 'external', 'destructive')),
  args               TEXT    NOT NULL,
  args_digest        TEXT    NOT NULL,
  status             TEXT    NOT NULL CHECK (status IN ('started', 'completed', 'failed', 'indeterminate', 'compensated')),
  attempt            INTEGER NOT NULL CHECK (attempt >= 1),
  version            INTEGER NOT NULL CHECK (version >= 1),
  result             TEXT,
  result_reference   TEXT,
  error              TEXT,
  compensation_of    TEXT,
  created_at         TEXT    NOT NULL,
  updated_at         TEXT    NOT NULL,
  attempt_started_at TEXT    NOT NULL,
  settled_at         TEXT,
  settled_by_kind    TEXT,
  settled_by_id      TEXT,
  PRIMARY KEY (tenant_id, idempotency_key)
) STRICT;

-- "A tenant's unknown calls, longest waiting first."
CREATE INDEX tool_executions_unknown
  ON tool_executions (tenant_id, attempt_started_at, idempotency_key)
  WHERE status IN ('started', 'indeterminate');
CREATE INDEX tool_executions_by_run ON tool_executions (tenant_id, run_id);
CREATE INDEX tool_executions_by_time ON tool_executions (tenant_id, attempt_started_at, idempotency_key);

CREATE TABLE tool_execution_events (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_id       TEXT    NOT NULL,
  idempotency_key TEXT    NOT NULL,
  at              TEXT    NOT NULL,
  kind            TEXT    NOT NULL CHECK (kind IN ('transition', 'ignored', 'note')),
  actor_kind      TEXT    NOT NULL CHECK (actor_kind IN ('runtime', 'reconcile', 'operator')),
  actor_id        TEXT    NOT NULL,
  via             TEXT,
  from_status     TEXT,
  to_status       TEXT,
  attempt         INTEGER NOT NULL,
  reason          TEXT,
  detail          TEXT,
  FOREIGN KEY (tenant_id, idempotency_key) REFERENCES tool_executions (tenant_id, idempotency_key)
) STRICT;
CREATE INDEX tool_execution_events_by_key ON tool_execution_events (tenant_id, idempotency_key, id);

-- Nothing in the ledger is ever deleted; history is never rewritten.
CREATE TRIGGER tool_execution_events_append_only_update BEFORE UPDATE ON tool_execution_events
BEGIN SELECT RAISE(ABORT, 'tool_execution_events is append-only'); END;
CREATE TRIGGER tool_execution_events_append_only_delete BEFORE DELETE ON tool_execution_events
BEGIN SELECT RAISE(ABORT, 'tool_execution_events is append-only'); END;
CREATE TRIGGER tool_executions_no_delete BEFORE DELETE ON tool_executions
BEGIN SELECT RAISE(ABORT, 'tool_executions records are never deleted'); END;
