-- Durable runs: the checkpoint (messages, step, pending calls), its version, and the lease with its
-- fencing epoch; the run's event stream; approvals bound to one call's arguments digest.
CREATE TABLE runs (
  tenant_id          text        NOT NULL,
  run_id             text        NOT NULL,
  agent              text        NOT NULL,
  status             text        NOT NULL CHECK (status IN ('queued', 'running', 'awaiting_approval',
                       'awaiting_reconciliation', 'completed', 'failed', 'cancelled')),
  input              jsonb       NOT NULL,
  checkpoint         jsonb       NOT NULL,
  checkpoint_version bigint      NOT NULL CHECK (checkpoint_version >= 1),
  lease_owner        text,
  lease_epoch        bigint      NOT NULL DEFAULT 0,
  lease_expires_at   timestamptz,
  result             jsonb,
  error              jsonb,
  status_reason      text,
  created_at         timestamptz NOT NULL DEFAULT oncely_now(),
  updated_at         timestamptz NOT NULL DEFAULT oncely_now(),
  PRIMARY KEY (tenant_id, run_id)
);
CREATE INDEX runs_claimable ON runs (status, lease_expires_at) WHERE status IN ('queued', 'running');
CREATE INDEX runs_awaiting ON runs (status, updated_at) WHERE status IN ('awaiting_approval', 'awaiting_reconciliation');
CREATE INDEX runs_by_tenant ON runs (tenant_id, created_at, run_id);

CREATE TABLE run_events (
  id        bigserial   PRIMARY KEY,
  tenant_id text        NOT NULL,
  run_id    text        NOT NULL,
  at        timestamptz NOT NULL DEFAULT oncely_now(),
  type      text        NOT NULL,
  data      jsonb       NOT NULL,
  FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, run_id)
);
CREATE INDEX run_events_by_run ON run_events (tenant_id, run_id, id);

CREATE TABLE approvals (
  tenant_id       text        NOT NULL,
  idempotency_key text        NOT NULL,
  run_id          text        NOT NULL,
  tool_name       text        NOT NULL,
  args            jsonb       NOT NULL,
  args_digest     text        NOT NULL,
  status          text        NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'consumed')),
  decided_by      text,
  reason          text,
  created_at      timestamptz NOT NULL DEFAULT oncely_now(),
  decided_at      timestamptz,
  consumed_at     timestamptz,
  PRIMARY KEY (tenant_id, idempotency_key),
  FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, run_id)
);
CREATE INDEX approvals_pending ON approvals (tenant_id, created_at, idempotency_key) WHERE status = 'pending';
CREATE INDEX approvals_by_run ON approvals (tenant_id, run_id);

CREATE TRIGGER run_events_append_only BEFORE UPDATE OR DELETE ON run_events
  FOR EACH ROW EXECUTE FUNCTION oncely_refuse_change();
