-- The processes that drive runs (see the PostgreSQL migration): one row each, written by its
-- heartbeat, for the `oncely workers` view. Leases alone decide who drives a run.
CREATE TABLE workers (
  worker_id    TEXT    NOT NULL PRIMARY KEY,
  kind         TEXT    NOT NULL CHECK (kind IN ('worker', 'serve')),
  host         TEXT    NOT NULL,
  pid          INTEGER NOT NULL,
  concurrency  INTEGER NOT NULL CHECK (concurrency >= 0),
  version      TEXT    NOT NULL,
  started_at   TEXT    NOT NULL,
  heartbeat_at TEXT    NOT NULL,
  stopping     INTEGER NOT NULL DEFAULT 0 CHECK (stopping IN (0, 1))
) STRICT, WITHOUT ROWID;
CREATE INDEX workers_by_heartbeat ON workers (heartbeat_at);
CREATE INDEX runs_by_lease_owner ON runs (lease_owner) WHERE lease_owner IS NOT NULL;

-- Cluster-wide tool limits (see the PostgreSQL migration): slot n of a tool is held by one call at a
-- time, under a lease its holder renews.
CREATE TABLE tool_slots (
  tool_name  TEXT    NOT NULL,
  slot       INTEGER NOT NULL CHECK (slot >= 0),
  holder     TEXT    NOT NULL,
  expires_at TEXT    NOT NULL,
  PRIMARY KEY (tool_name, slot)
) STRICT, WITHOUT ROWID;
