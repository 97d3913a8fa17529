-- Workflows of agent runs (see the PostgreSQL migration): a row per workflow run, advanced under a
-- lease whose epoch fences its bookkeeping, and its events, append-only.
CREATE TABLE workflow_runs (
  tenant_id        TEXT    NOT NULL,
  workflow_run_id  TEXT    NOT NULL,
  workflow         TEXT    NOT NULL,
  input            TEXT    NOT NULL,
  input_digest     TEXT    NOT NULL,
  status           TEXT    NOT NULL
    CHECK (status IN ('running', 'awaiting_operator', 'completed', 'failed', 'cancelled')),
  status_reason    TEXT,
  result           TEXT,
  error            TEXT,
  version          INTEGER NOT NULL DEFAULT 1,
  lease_owner      TEXT,
  lease_epoch      INTEGER NOT NULL DEFAULT 0,
  lease_expires_at TEXT,
  wake_at          TEXT    NOT NULL,
  created_at       TEXT    NOT NULL,
  updated_at       TEXT    NOT NULL,
  PRIMARY KEY (tenant_id, workflow_run_id)
) STRICT;
CREATE INDEX workflow_runs_due ON workflow_runs (wake_at) WHERE status = 'running';
CREATE INDEX workflow_runs_by_tenant ON workflow_runs (tenant_id, created_at DESC, workflow_run_id DESC);

CREATE TABLE workflow_events (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_id       TEXT    NOT NULL,
  workflow_run_id TEXT    NOT NULL,
  at              TEXT    NOT NULL,
  kind            TEXT    NOT NULL,
  node            TEXT,
  attempt         INTEGER,
  run_id          TEXT,
  reason          TEXT,
  detail          TEXT
) STRICT;
CREATE INDEX workflow_events_of_run ON workflow_events (tenant_id, workflow_run_id, id);
CREATE UNIQUE INDEX workflow_events_node_once ON workflow_events (tenant_id, workflow_run_id, kind, node, attempt)
  WHERE node IS NOT NULL;
CREATE TRIGGER workflow_events_append_only_update BEFORE UPDATE ON workflow_events
BEGIN SELECT RAISE(ABORT, 'workflow_events is append-only'); END;
CREATE TRIGGER workflow_events_append_only_delete BEFORE DELETE ON workflow_events
BEGIN SELECT RAISE(ABORT, 'workflow_events is append-only'); END;
