-- Run-event wake-ups (LISTEN oncely_run_events): an API process streaming a run's events (SSE) reads
-- on as soon as another process wrote some, instead of at its next poll. Only for watched runs: an
-- API server watches the runs it streams (a row per run and server, renewed while the stream is
-- open, expiring if the server is gone), and a run's event is notified (tenant and run id joined by
-- the unit separator, chr(31), sent on commit, once per transaction) only if someone watches it.
-- NOTIFY serializes commits, so the steps of runs nobody streams send nothing. Speed, never truth: a
-- stream still reads on a timer.
CREATE TABLE run_event_watches (
  tenant_id  text        NOT NULL,
  run_id     text        NOT NULL,
  watcher    text        NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, run_id, watcher)
);
CREATE FUNCTION oncely_run_events_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM run_event_watches w
             WHERE w.tenant_id = NEW.tenant_id AND w.run_id = NEW.run_id AND w.expires_at > now()) THEN
    PERFORM pg_notify('oncely_run_events', NEW.tenant_id || chr(31) || NEW.run_id);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER run_events_wake AFTER INSERT ON run_events
  FOR EACH ROW EXECUTE FUNCTION oncely_run_events_wake();
