-- Run-event wake-ups (0011) once per statement instead of once per event row: a step's write inserts
-- a run's events in one statement (a grouped write, several runs' events), and a row trigger called
-- its function, with its look-up of the watches, for each of them; on the hot path that was a few
-- percent of the server's time. Same notifications: one per watched run the statement wrote events
-- of (all the statement's inserts into run_events, whichever common table expression made them,
-- are in its transition table), sent on commit.
DROP TRIGGER run_events_wake ON run_events;
DROP FUNCTION oncely_run_events_wake();
CREATE FUNCTION oncely_run_events_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('oncely_run_events', w.tenant_id || chr(31) || w.run_id)
  FROM (SELECT DISTINCT a.tenant_id, a.run_id FROM added a) AS w
  WHERE EXISTS (SELECT 1 FROM run_event_watches x
                WHERE x.tenant_id = w.tenant_id AND x.run_id = w.run_id AND x.expires_at > now());
  RETURN NULL;
END $$;
CREATE TRIGGER run_events_wake AFTER INSERT ON run_events
  REFERENCING NEW TABLE AS added
  FOR EACH STATEMENT EXECUTE FUNCTION oncely_run_events_wake();
