-- The hot path writes less. A history event no longer checks and locks its record or run through a
-- foreign key (a trigger, a lookup and a row lock for every event): each event is written by the
-- statement that reads or writes its parent row, and no parent is ever deleted (records already
-- refuse DELETE; runs now do too). Run events lose an index nothing reads by (they are read by seq).

ALTER TABLE tool_execution_events DROP CONSTRAINT tool_execution_events_tenant_id_idempotency_key_fkey;
ALTER TABLE run_events DROP CONSTRAINT run_events_tenant_id_run_id_fkey;
DROP INDEX run_events_by_run;
CREATE TRIGGER runs_no_delete BEFORE DELETE ON runs
  FOR EACH ROW EXECUTE FUNCTION oncely_refuse_change();

-- One index per history table instead of two: a record's events are found (and ordered) by
-- (tenant_id, idempotency_key, id), a run's by (tenant_id, run_id, seq); no read goes by id alone.
CREATE UNIQUE INDEX tool_execution_events_key_id ON tool_execution_events (tenant_id, idempotency_key, id);
ALTER TABLE tool_execution_events DROP CONSTRAINT tool_execution_events_pkey;
ALTER TABLE tool_execution_events ADD CONSTRAINT tool_execution_events_pkey
  PRIMARY KEY USING INDEX tool_execution_events_key_id;
DROP INDEX tool_execution_events_by_key;
ALTER TABLE run_events DROP CONSTRAINT run_events_pkey;
ALTER TABLE run_events ADD CONSTRAINT run_events_pkey PRIMARY KEY USING INDEX run_events_by_seq;
