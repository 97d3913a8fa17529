-- The counts behind /metrics (calls by tool and status, runs by status), kept by triggers in the
-- transaction of every write that changes them, instead of counted at each scrape: see the
-- PostgreSQL migration. SQLite has one writer at a time, so one row per count (no shards).
CREATE TABLE tool_call_counts (
  tool_name TEXT    NOT NULL,
  status    TEXT    NOT NULL,
  n         INTEGER NOT NULL,
  PRIMARY KEY (tool_name, status)
) WITHOUT ROWID;
CREATE TABLE run_counts (
  status TEXT    NOT NULL PRIMARY KEY,
  n      INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TRIGGER tool_executions_count_inserted AFTER INSERT ON tool_executions BEGIN
  INSERT INTO tool_call_counts (tool_name, status, n) VALUES (NEW.tool_name, NEW.status, 1)
  ON CONFLICT (tool_name, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER tool_executions_count_updated AFTER UPDATE OF status, tool_name ON tool_executions
  WHEN NEW.status IS NOT OLD.status OR NEW.tool_name IS NOT OLD.tool_name BEGIN
  INSERT INTO tool_call_counts (tool_name, status, n) VALUES (NEW.tool_name, NEW.status, 1)
  ON CONFLICT (tool_name, status) DO UPDATE SET n = n + 1;
  INSERT INTO tool_call_counts (tool_name, status, n) VALUES (OLD.tool_name, OLD.status, -1)
  ON CONFLICT (tool_name, status) DO UPDATE SET n = n - 1;
END;
CREATE TRIGGER runs_count_inserted AFTER INSERT ON runs BEGIN
  INSERT INTO run_counts (status, n) VALUES (NEW.status, 1)
  ON CONFLICT (status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER runs_count_updated AFTER UPDATE OF status ON runs
  WHEN NEW.status IS NOT OLD.status BEGIN
  INSERT INTO run_counts (status, n) VALUES (NEW.status, 1)
  ON CONFLICT (status) DO UPDATE SET n = n + 1;
  INSERT INTO run_counts (status, n) VALUES (OLD.status, -1)
  ON CONFLICT (status) DO UPDATE SET n = n - 1;
END;

-- The counts of the rows already there (the migration holds the write lock: no write falls between).
INSERT INTO tool_call_counts (tool_name, status, n)
SELECT tool_name, status, COUNT(*) FROM tool_executions GROUP BY tool_name, status;
INSERT INTO run_counts (status, n) SELECT status, COUNT(*) FROM runs GROUP BY status;
