-- Workflows of agent runs. A workflow run's row holds where it stands; its nodes' runs are ordinary
-- runs whose ids say which node and attempt they are (<workflow_run_id>.<node>.<attempt>), so one
-- attempt of a node is one run however many processes start it. The row is advanced by whoever holds
-- its lease (lease_epoch fences every write of its bookkeeping); wake_at says when to look again.
CREATE TABLE workflow_runs (
  tenant_id        text        NOT NULL,
  workflow_run_id  text        NOT NULL,
  workflow         text        NOT NULL,
  input            jsonb       NOT NULL,
  input_digest     text        NOT NULL,
  status           text        NOT NULL
    CHECK (status IN ('running', 'awaiting_operator', 'completed', 'failed', 'cancelled')),
  status_reason    text,
  result           jsonb,
  error            jsonb,
  version          integer     NOT NULL DEFAULT 1,
  lease_owner      text,
  lease_epoch      bigint      NOT NULL DEFAULT 0,
  lease_expires_at timestamptz,
  wake_at          timestamptz NOT NULL DEFAULT oncely_now(),
  created_at       timestamptz NOT NULL DEFAULT oncely_now(),
  updated_at       timestamptz NOT NULL DEFAULT oncely_now(),
  PRIMARY KEY (tenant_id, workflow_run_id)
);
-- The claim: running workflows due to be looked at.
CREATE INDEX workflow_runs_due ON workflow_runs (wake_at) WHERE status = 'running';
-- The list: a tenant's newest first.
CREATE INDEX workflow_runs_by_tenant ON workflow_runs (tenant_id, created_at DESC, workflow_run_id DESC);

-- What happened to a workflow run, in order (append-only): it started, each node's run started or
-- ended or the node was skipped, the workflow's status changed. A node's event of a kind is written
-- once per attempt (the unique index), whoever writes it.
CREATE TABLE workflow_events (
  id              bigserial   PRIMARY KEY,
  tenant_id       text        NOT NULL,
  workflow_run_id text        NOT NULL,
  at              timestamptz NOT NULL DEFAULT oncely_now(),
  kind            text        NOT NULL,
  node            text,
  attempt         integer,
  run_id          text,
  reason          text,
  detail          jsonb
);
CREATE INDEX workflow_events_of_run ON workflow_events (tenant_id, workflow_run_id, id);
CREATE UNIQUE INDEX workflow_events_node_once ON workflow_events (tenant_id, workflow_run_id, kind, node, attempt)
  WHERE node IS NOT NULL;
CREATE TRIGGER workflow_events_append_only BEFORE UPDATE OR DELETE ON workflow_events
  FOR EACH ROW EXECUTE FUNCTION oncely_refuse_change();
