-- The counts behind /metrics (calls by tool and status, runs by status), kept as the writes happen
-- instead of counted at each scrape (a GROUP BY over every ledger row and run: 0.2-0.5 s at a million
-- calls). Each count is spread over shard rows and summed when read; a write moves its counts in the
-- same transaction, by triggers, so no write path can forget them and none gains a statement.
--
-- A transaction writes to one shard no other open transaction writes to: it takes the shard's
-- advisory lock (transaction-scoped, re-entrant) before touching its rows, trying its connection's
-- own shard first and the others after it. So two writers never wait for each other's count rows,
-- and no order of count updates across the statements of a transaction can deadlock. Only with more
-- writing transactions open at once than there are shards does one wait for a shard's lock.
CREATE TABLE tool_call_counts (
  tool_name text     NOT NULL,
  status    text     NOT NULL,
  shard     smallint NOT NULL,
  n         bigint   NOT NULL,
  PRIMARY KEY (tool_name, status, shard)
);
CREATE TABLE run_counts (
  status text     NOT NULL,
  shard  smallint NOT NULL,
  n      bigint   NOT NULL,
  PRIMARY KEY (status, shard)
);

-- The shard of this transaction's count rows (0-31), held under advisory lock (1869505381, shard)
-- until it ends. 1869505381 is 'once' in ASCII: the class of oncely's count locks.
CREATE FUNCTION oncely_count_shard() RETURNS integer LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  own integer := pg_backend_pid() % 32;
BEGIN
  FOR i IN 0..31 LOOP
    IF pg_try_advisory_xact_lock(1869505381, (own + i) % 32) THEN
      RETURN (own + i) % 32;
    END IF;
  END LOOP;
  PERFORM pg_advisory_xact_lock(1869505381, own);
  RETURN own;
END $$;

-- A statement's new records and runs are counted once per statement (its transition table, grouped),
-- so a statement inserting many rows moves each count once, not once a row.
CREATE FUNCTION oncely_count_calls_added() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  s integer;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM added) THEN RETURN NULL; END IF;
  s := oncely_count_shard();
  INSERT INTO tool_call_counts AS c (tool_name, status, shard, n)
  SELECT tool_name, status, s, count(*) FROM added GROUP BY tool_name, status ORDER BY tool_name, status
  ON CONFLICT (tool_name, status, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;
-- Records and runs are never deleted (tool_executions_no_delete, runs_no_delete): no DELETE to count.
CREATE TRIGGER tool_executions_count_inserted AFTER INSERT ON tool_executions
  REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION oncely_count_calls_added();

-- A status change moves one count down and another up. Only a write that changes a record's status
-- (or tool) calls the function; the others (a conflict mark, a checkpoint save) cost a test of WHEN.
CREATE FUNCTION oncely_count_calls_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  s integer := oncely_count_shard();
BEGIN
  INSERT INTO tool_call_counts AS c (tool_name, status, shard, n) VALUES (NEW.tool_name, NEW.status, s, 1)
  ON CONFLICT (tool_name, status, shard) DO UPDATE SET n = c.n + 1;
  INSERT INTO tool_call_counts AS c (tool_name, status, shard, n) VALUES (OLD.tool_name, OLD.status, s, -1)
  ON CONFLICT (tool_name, status, shard) DO UPDATE SET n = c.n - 1;
  RETURN NULL;
END $$;
CREATE TRIGGER tool_executions_count_updated AFTER UPDATE OF status, tool_name ON tool_executions
  FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status OR NEW.tool_name IS DISTINCT FROM OLD.tool_name)
  EXECUTE FUNCTION oncely_count_calls_moved();

CREATE FUNCTION oncely_count_runs_added() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  s integer;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM added) THEN RETURN NULL; END IF;
  s := oncely_count_shard();
  INSERT INTO run_counts AS c (status, shard, n)
  SELECT status, s, count(*) FROM added GROUP BY status ORDER BY status
  ON CONFLICT (status, shard) DO UPDATE SET n = c.n + excluded.n;
  RETURN NULL;
END $$;
CREATE TRIGGER runs_count_inserted AFTER INSERT ON runs
  REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION oncely_count_runs_added();

CREATE FUNCTION oncely_count_runs_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  s integer := oncely_count_shard();
BEGIN
  INSERT INTO run_counts AS c (status, shard, n) VALUES (NEW.status, s, 1)
  ON CONFLICT (status, shard) DO UPDATE SET n = c.n + 1;
  INSERT INTO run_counts AS c (status, shard, n) VALUES (OLD.status, s, -1)
  ON CONFLICT (status, shard) DO UPDATE SET n = c.n - 1;
  RETURN NULL;
END $$;
CREATE TRIGGER runs_count_updated AFTER UPDATE OF status ON runs
  FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status) EXECUTE FUNCTION oncely_count_runs_moved();

-- The counts of the rows already there. Creating the triggers locked both tables against writes
-- until this migration commits, so no write falls between the count and the triggers.
INSERT INTO tool_call_counts (tool_name, status, shard, n)
SELECT tool_name, status, 0, count(*) FROM tool_executions GROUP BY tool_name, status;
INSERT INTO run_counts (status, shard, n) SELECT status, 0, count(*) FROM runs GROUP BY status;
