-- The processes that drive runs (`oncely worker`, `oncely serve` with its worker): one row each,
-- written by its heartbeat, for the `oncely workers` view and GET /v1/workers. Speed and sight only,
-- never truth: leases alone decide who drives a run, and a worker whose row is gone still renews
-- its leases. A row not heartbeaten for a day is removed by the next heartbeat of any worker.
CREATE TABLE workers (
  worker_id    text        PRIMARY KEY,
  kind         text        NOT NULL CHECK (kind IN ('worker', 'serve')),
  host         text        NOT NULL,
  pid          integer     NOT NULL,
  concurrency  integer     NOT NULL CHECK (concurrency >= 0),
  version      text        NOT NULL,
  started_at   timestamptz NOT NULL DEFAULT oncely_now(),
  heartbeat_at timestamptz NOT NULL DEFAULT oncely_now(),
  stopping     boolean     NOT NULL DEFAULT false
);
CREATE INDEX workers_by_heartbeat ON workers (heartbeat_at);
-- The runs a worker holds, for the view.
CREATE INDEX runs_by_lease_owner ON runs (lease_owner) WHERE lease_owner IS NOT NULL;

-- Wake-ups (LISTEN oncely_wake): speed, never truth; a worker that hears nothing still polls.
-- 'queued': a run was queued (created, released, requeued, retried): a worker may claim it now.
-- 'settled': an unknown call was settled (an operator, a hook, a late answer) or an approval decided:
-- a waiting run may go on, so a worker sweeps now. Sent on commit, once per transaction and payload;
-- never on the hot path (a call's own outcome, a step's checkpoint).
CREATE FUNCTION oncely_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('oncely_wake', TG_ARGV[0]);
  RETURN NULL;
END $$;
CREATE TRIGGER runs_wake_queued AFTER INSERT OR UPDATE OF status ON runs
  FOR EACH ROW WHEN (NEW.status = 'queued') EXECUTE FUNCTION oncely_wake('queued');
CREATE TRIGGER tool_executions_wake_settled AFTER UPDATE OF status ON tool_executions
  FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status
    AND (OLD.status = 'indeterminate' OR NEW.settled_by_kind IN ('operator', 'reconcile')))
  EXECUTE FUNCTION oncely_wake('settled');
CREATE TRIGGER approvals_wake_settled AFTER UPDATE OF status ON approvals
  FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status IN ('approved', 'rejected'))
  EXECUTE FUNCTION oncely_wake('settled');

-- Cluster-wide tool limits (`concurrency` on a tool): slot n of a tool is held by one call at a time,
-- under a lease its holder renews while the call runs; a crashed holder's slot comes back when its
-- lease expires. A call whose outcome is unknown keeps its slot until its attempt can no longer land.
CREATE TABLE tool_slots (
  tool_name  text        NOT NULL,
  slot       integer     NOT NULL CHECK (slot >= 0),
  holder     text        NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (tool_name, slot)
);
