-- The model responses of loops an application drives itself (its own AI SDK generateText or
-- streamText loop, through oncely/ai-sdk): one row per step of a run, written once, before any tool
-- of that response runs. The response carries the tool call ids oncely minted, so a restarted loop
-- replays the same response and every call keeps its key. `prompt_digest` is the digest of the
-- conversation the step answered (system messages left out), so a loop that diverges is refused.
CREATE TABLE loop_steps (
  tenant_id     text        NOT NULL,
  run_id        text        NOT NULL,
  step          integer     NOT NULL CHECK (step >= 0),
  prompt_digest text        NOT NULL,
  response      jsonb       NOT NULL,
  model_id      text        NOT NULL,
  usage         jsonb,
  created_at    timestamptz NOT NULL DEFAULT oncely_now(),
  PRIMARY KEY (tenant_id, run_id, step)
);
CREATE TRIGGER loop_steps_append_only BEFORE UPDATE OR DELETE ON loop_steps
  FOR EACH ROW EXECUTE FUNCTION oncely_refuse_change();
