-- Durable runs: the checkpoint (messages, step, pending calls), its version, and the lease with its
-- fencing epoch; the run's event stream; approvals bound to one call's arguments digest.
CREATE TABLE runs (
  tenant_id          TEXT    NOT NULL,
  run_id             TEXT    NOT NULL,
  agent              TEXT    NOT NULL,
  status             TEXT    NOT NULL CHECK (status IN ('queued', 'running', 'awaiting_approval',
                       'awaiting_reconciliation', 'completed', 'failed', 'cancelled')),
  input              TEXT    NOT NULL,
  checkpoint         TEXT    NOT NULL,
  checkpoint_version INTEGER NOT NULL CHECK (checkpoint_version >= 1),
  lease_owner        TEXT,
  lease_epoch        INTEGER NOT NULL DEFAULT 0,
  lease_expires_at   TEXT,
  result             TEXT,
  error              TEXT,
  status_reason      TEXT,
  created_at         TEXT    NOT NULL,
  updated_at         TEXT    NOT NULL,
  PRIMARY KEY (tenant_id, run_id)
) STRICT;
CREATE INDEX runs_claimable ON runs (status, lease_expires_at) WHERE status IN ('queued', 'running');
CREATE INDEX runs_awaiting ON runs (status, updated_at) WHERE status IN ('awaiting_approval', 'awaiting_reconciliation');
CREATE INDEX runs_by_tenant ON runs (tenant_id, created_at, run_id);

CREATE TABLE run_events (
  id        INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_id TEXT NOT NULL,
  run_id    TEXT NOT NULL,
  at        TEXT NOT NULL,
  type      TEXT NOT NULL,
  data      TEXT NOT NULL,
  FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, run_id)
) STRICT;
CREATE INDEX run_events_by_run ON run_events (tenant_id, run_id, id);

CREATE TABLE approvals (
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
  PRIMARY KEY (tenant_id, idempotency_key),
  FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, run_id)
) STRICT;
CREATE INDEX approvals_pending ON approvals (tenant_id, created_at, idempotency_key) WHERE status = 'pending';
CREATE INDEX approvals_by_run ON approvals (tenant_id, run_id);

CREATE TRIGGER run_events_append_only_update BEFORE UPDATE ON run_events
BEGIN SELECT RAISE(ABORT, 'run_events is append-only'); END;
CREATE TRIGGER run_events_append_only_delete BEFORE DELETE ON run_events
BEGIN SELECT RAISE(ABORT, 'run_events is append-only'); END;
