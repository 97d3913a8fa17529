-- Conversations: a run takes further user messages once it has answered (turns), and keeps what its
-- model calls cost.
--
-- A turn is one user message and the steps that answer it. Turn 1 is the run's input; each later turn
-- is a message sent to the completed run, one row here, written once, by the same statement that
-- appends the message to run_messages and queues the run again. The client's message id is unique
-- within the run, so a message sent twice (a retry after a lost answer) is one turn. `turn` and
-- `turn_step` (the step counter when the turn began: max_steps counts per turn) are on the run.
--
-- Usage: the tokens of every model response the run kept, summed on the run's row by the save that
-- keeps the response (the same write, so a response counts once); `last_input_tokens` is the prompt of
-- the last call, a lower bound of the next one's (a conversation only grows), for the token budget.
ALTER TABLE runs
  ADD COLUMN turn                integer NOT NULL DEFAULT 1 CHECK (turn >= 1),
  ADD COLUMN turn_step           integer NOT NULL DEFAULT 0 CHECK (turn_step >= 0),
  ADD COLUMN input_tokens        bigint  NOT NULL DEFAULT 0,
  ADD COLUMN output_tokens       bigint  NOT NULL DEFAULT 0,
  ADD COLUMN reasoning_tokens    bigint  NOT NULL DEFAULT 0,
  ADD COLUMN cached_input_tokens bigint  NOT NULL DEFAULT 0,
  ADD COLUMN total_tokens        bigint  NOT NULL DEFAULT 0,
  ADD COLUMN last_input_tokens   bigint  NOT NULL DEFAULT 0,
  ADD COLUMN token_budget        bigint  CHECK (token_budget IS NULL OR token_budget > 0);

CREATE TABLE run_turns (
  tenant_id         text        NOT NULL,
  run_id            text        NOT NULL,
  turn              integer     NOT NULL CHECK (turn >= 2),
  client_message_id text        NOT NULL,
  message_idx       integer     NOT NULL CHECK (message_idx >= 0),
  message_digest    text        NOT NULL,
  actor_id          text,
  created_at        timestamptz NOT NULL DEFAULT oncely_now(),
  PRIMARY KEY (tenant_id, run_id, turn),
  UNIQUE (tenant_id, run_id, client_message_id)
);
CREATE TRIGGER run_turns_append_only BEFORE UPDATE OR DELETE ON run_turns
  FOR EACH ROW EXECUTE FUNCTION oncely_refuse_change();

-- Runs already made: their usage from the model.response events they hold.
UPDATE runs r SET input_tokens = u.input, output_tokens = u.output, reasoning_tokens = u.reasoning,
  cached_input_tokens = u.cached, total_tokens = u.total, last_input_tokens = u.last_input
FROM (
  SELECT tenant_id, run_id,
    sum(COALESCE((data #>> '{usage,inputTokens}')::bigint, 0)) AS input,
    sum(COALESCE((data #>> '{usage,outputTokens}')::bigint, 0)) AS output,
    sum(COALESCE((data #>> '{usage,reasoningTokens}')::bigint, 0)) AS reasoning,
    sum(COALESCE((data #>> '{usage,cachedInputTokens}')::bigint, 0)) AS cached,
    sum(COALESCE((data #>> '{usage,totalTokens}')::bigint,
      COALESCE((data #>> '{usage,inputTokens}')::bigint, 0) + COALESCE((data #>> '{usage,outputTokens}')::bigint, 0))) AS total,
    (array_agg(COALESCE((data #>> '{usage,inputTokens}')::bigint, 0) ORDER BY seq DESC))[1] AS last_input
  FROM run_events WHERE type = 'model.response' GROUP BY tenant_id, run_id
) u
WHERE r.tenant_id = u.tenant_id AND r.run_id = u.run_id;
