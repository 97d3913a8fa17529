-- The model responses of loops an application drives itself (see the PostgreSQL migration): one row
-- per step of a run, written once, before any tool of that response runs.
CREATE TABLE loop_steps (
  tenant_id     TEXT    NOT NULL,
  run_id        TEXT    NOT NULL,
  step          INTEGER NOT NULL CHECK (step >= 0),
  prompt_digest TEXT    NOT NULL,
  response      TEXT    NOT NULL,
  model_id      TEXT    NOT NULL,
  usage         TEXT,
  created_at    TEXT    NOT NULL,
  PRIMARY KEY (tenant_id, run_id, step)
) STRICT, WITHOUT ROWID;
CREATE TRIGGER loop_steps_append_only_update BEFORE UPDATE ON loop_steps
BEGIN SELECT RAISE(ABORT, 'loop_steps is append-only'); END;
CREATE TRIGGER loop_steps_append_only_delete BEFORE DELETE ON loop_steps
BEGIN SELECT RAISE(ABORT, 'loop_steps is append-only'); END;
