-- Repeats: see the PostgreSQL migration. One partial index serves the run, conversation and tenant
-- scopes of the lookup for an earlier call with the same digest.
ALTER TABLE tool_executions ADD COLUMN repeat_digest TEXT;
ALTER TABLE tool_executions ADD COLUMN conversation_id TEXT;
CREATE INDEX tool_executions_repeats
  ON tool_executions (tenant_id, repeat_digest, run_id, created_at)
  WHERE repeat_digest IS NOT NULL;
ALTER TABLE approvals ADD COLUMN repeat_of TEXT;
