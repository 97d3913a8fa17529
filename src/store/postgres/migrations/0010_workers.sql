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
