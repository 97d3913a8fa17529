-- Conversations (see the PostgreSQL migration): turns of a run, each later one a user message sent to
-- the completed run, one row each, written once; the run's usage summed by the save that keeps each
-- model response; an optional token budget.
ALTER TABLE runs ADD COLUMN turn INTEGER NOT NULL DEFAULT 1 CHECK (turn >= 1);
ALTER TABLE runs ADD COLUMN turn_step INTEGER NOT NULL DEFAULT 0 CHECK (turn_step >= 0);
ALTER TABLE runs ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cached_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN total_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN last_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN token_budget INTEGER CHECK (token_budget IS NULL OR token_budget > 0);

CREATE TABLE run_turns (
  tenant_id         TEXT    NOT NULL,
  run_id            TEXT    NOT NULL,
  turn              INTEGER NOT NULL CHECK (turn >= 2),
  client_message_id TEXT    NOT NULL,
  message_idx       INTEGER NOT NULL CHECK (message_idx >= 0),
  message_digest    TEXT    NOT NULL,
  actor_id          TEXT,
  created_at        TEXT    NOT NULL,
  PRIMARY KEY (tenant_id, run_id, turn),
  UNIQUE (tenant_id, run_id, client_message_id)
) STRICT, WITHOUT ROWID;
CREATE TRIGGER run_turns_append_only_update BEFORE UPDATE ON run_turns
BEGIN SELECT RAISE(ABORT, 'run_turns is append-only'); END;
CREATE TRIGGER run_turns_append_only_delete BEFORE DELETE ON run_turns
BEGIN SELECT RAISE(ABORT, 'run_turns is append-only'); END;

UPDATE runs SET
  input_tokens = COALESCE((SELECT sum(COALESCE(json_extract(e.data, '$.usage.inputTokens'), 0)) FROM run_events e
    WHERE e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id AND e.type = 'model.response'), 0),
  output_tokens = COALESCE((SELECT sum(COALESCE(json_extract(e.data, '$.usage.outputTokens'), 0)) FROM run_events e
    WHERE e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id AND e.type = 'model.response'), 0),
  reasoning_tokens = COALESCE((SELECT sum(COALESCE(json_extract(e.data, '$.usage.reasoningTokens'), 0)) FROM run_events e
    WHERE e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id AND e.type = 'model.response'), 0),
  cached_input_tokens = COALESCE((SELECT sum(COALESCE(json_extract(e.data, '$.usage.cachedInputTokens'), 0)) FROM run_events e
    WHERE e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id AND e.type = 'model.response'), 0),
  total_tokens = COALESCE((SELECT sum(COALESCE(json_extract(e.data, '$.usage.totalTokens'),
      COALESCE(json_extract(e.data, '$.usage.inputTokens'), 0) + COALESCE(json_extract(e.data, '$.usage.outputTokens'), 0)))
    FROM run_events e WHERE e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id AND e.type = 'model.response'), 0),
  last_input_tokens = COALESCE((SELECT COALESCE(json_extract(e.data, '$.usage.inputTokens'), 0) FROM run_events e
    WHERE e.tenant_id = runs.tenant_id AND e.run_id = runs.run_id AND e.type = 'model.response'
    ORDER BY e.seq DESC LIMIT 1), 0);
