-- The promise at its edges: how long an attempt may run (so a key is re-opened only once its last
-- attempt can no longer land), conflicts made loud, drive attempts counted per run, model outages
-- retried with backoff, a per-run event sequence, and approvals of guarded calls that belong to no
-- run. SQLite cannot alter a CHECK or drop a foreign key, so two tables are rebuilt (the implicit
-- delete of DROP TABLE fires no trigger; rows keep their ids).

ALTER TABLE tool_executions ADD COLUMN attempt_timeout_ms INTEGER CHECK (attempt_timeout_ms >= 0);
ALTER TABLE tool_executions ADD COLUMN conflict_at TEXT;
CREATE INDEX tool_executions_conflicts
  ON tool_executions (tenant_id, attempt_started_at, idempotency_key) WHERE conflict_at IS NOT NULL;

CREATE TABLE tool_execution_events_new (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_id       TEXT    NOT NULL,
  idempotency_key TEXT    NOT NULL,
  at              TEXT    NOT NULL,
  kind            TEXT    NOT NULL CHECK (kind IN ('transition', 'ignored', 'note', 'conflict')),
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
INSERT INTO tool_execution_events_new SELECT * FROM tool_execution_events;
DROP TABLE tool_execution_events;
ALTER TABLE tool_execution_events_new RENAME TO tool_execution_events;
CREATE INDEX tool_execution_events_by_key ON tool_execution_events (tenant_id, idempotency_key, id);
CREATE TRIGGER tool_execution_events_append_only_update BEFORE UPDATE ON tool_execution_events
BEGIN SELECT RAISE(ABORT, 'tool_execution_events is append-only'); END;
CREATE TRIGGER tool_execution_events_append_only_delete BEFORE DELETE ON tool_execution_events
BEGIN SELECT RAISE(ABORT, 'tool_execution_events is append-only'); END;

ALTER TABLE runs ADD COLUMN drive_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN model_outages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN last_error TEXT;
ALTER TABLE runs ADD COLUMN event_seq INTEGER NOT NULL DEFAULT 0;

ALTER TABLE run_events ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
DROP TRIGGER run_events_append_only_update;
UPDATE run_events SET seq = (SELECT count(*) FROM run_events e
  WHERE e.tenant_id = run_events.tenant_id AND e.run_id = run_events.run_id AND e.id <= run_events.id);
CREATE TRIGGER run_events_append_only_update BEFORE UPDATE ON run_events
BEGIN SELECT RAISE(ABORT, 'run_events is append-only'); END;
CREATE UNIQUE INDEX run_events_by_seq ON run_events (tenant_id, run_id, seq);
UPDATE runs SET event_seq = COALESCE((SELECT max(seq) FROM run_events e
  WHERE e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id), 0);

CREATE TABLE approvals_new (
  tenant_id       TEXT NOT NULL,
  idempotency_key TEXT NOT NULL,
  run_id          TEXT NOT NULL,
  tool_name       TEXT NOT NULL,
  args            TEXT NOT NULL,
  args_digest     TEXT NOT NULL,
  status          TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'consumed')),
  decided_by      TEXT,
  reason          TEXT,
  created_at      TEXT NOT NULL,
  decided_at      TEXT,
  consumed_at     TEXT,
  PRIMARY KEY (tenant_id, idempotency_key)
) STRICT;
INSERT INTO approvals_new SELECT * FROM approvals;
DROP TABLE approvals;
ALTER TABLE approvals_new RENAME TO approvals;
CREATE INDEX approvals_pending ON approvals (tenant_id, created_at, idempotency_key) WHERE status = 'pending';
CREATE INDEX approvals_by_run ON approvals (tenant_id, run_id);
