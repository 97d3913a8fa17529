-- Repeats (the model calls a tool again): each non-read call keeps the digest of its tool and the
-- identity of its arguments (`repeatKey`, by default the canonical arguments), and the conversation
-- id a guarded call was made in. A new call looks for an earlier one with its digest in its scope
-- (its run, its conversation, or its tenant within a window): one partial index serves all three.
ALTER TABLE tool_executions ADD COLUMN repeat_digest text, ADD COLUMN conversation_id text;
CREATE INDEX tool_executions_repeats
  ON tool_executions (tenant_id, repeat_digest, run_id, created_at)
  WHERE repeat_digest IS NOT NULL;
-- An approval asked for because a call repeats an earlier one names that earlier call's key.
ALTER TABLE approvals ADD COLUMN repeat_of text;
