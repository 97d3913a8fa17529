-- The counts' triggers (0017) do the same work in fewer statements. A new record's counts are moved
-- by one statement (no separate check that the insert added rows: grouping no rows inserts none, and
-- the shard's lock is then never taken), so a replay, whose insert adds nothing, pays one empty
-- grouping; a status change moves its two counts (one down, one up) by one statement instead of two.
-- The two counts of one change are different rows (the WHEN clause holds only when the status or the
-- tool changes), so the statement never updates a row twice.
CREATE OR REPLACE FUNCTION oncely_count_calls_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO tool_call_counts AS c (tool_name, status, shard, n)
  SELECT tool_name, status, oncely_count_shard(), count(*) FROM added
  GROUP BY tool_name, status ORDER BY tool_name, status
  ON CONFLICT (tool_name, status, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION oncely_count_calls_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  s integer := oncely_count_shard();
BEGIN
  INSERT INTO tool_call_counts AS c (tool_name, status, shard, n)
  VALUES (NEW.tool_name, NEW.status, s, 1), (OLD.tool_name, OLD.status, s, -1)
  ON CONFLICT (tool_name, status, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION oncely_count_runs_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO run_counts AS c (status, shard, n)
  SELECT status, oncely_count_shard(), count(*) FROM added GROUP BY status ORDER BY status
  ON CONFLICT (status, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION oncely_count_runs_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  s integer := oncely_count_shard();
BEGIN
  INSERT INTO run_counts AS c (status, shard, n) VALUES (NEW.status, s, 1), (OLD.status, s, -1)
  ON CONFLICT (status, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;
