-- A run's conversation is append-only: one row per message in run_messages (the model's response with
-- the call ids minted for it, the tool message that tells a step's outcomes), written once by the save
-- that adds it. The runs row keeps only what changes (status, lease, epoch, version, the step counter,
-- the pending calls of the step under way, how many messages the run holds), so a save writes what is
-- new, and its cost does not grow with the length of the run. Existing checkpoints move here.
CREATE TABLE run_messages (
  tenant_id text    NOT NULL,
  run_id    text    NOT NULL,
  idx       integer NOT NULL CHECK (idx >= 0),
  message   jsonb   NOT NULL,
  PRIMARY KEY (tenant_id, run_id, idx)
);
CREATE TRIGGER run_messages_append_only BEFORE UPDATE OR DELETE ON run_messages
  FOR EACH ROW EXECUTE FUNCTION oncely_refuse_change();

ALTER TABLE runs ADD COLUMN step integer NOT NULL DEFAULT 0,
  ADD COLUMN pending jsonb,
  ADD COLUMN message_count integer NOT NULL DEFAULT 0;

INSERT INTO run_messages (tenant_id, run_id, idx, message)
SELECT r.tenant_id, r.run_id, m.n - 1, m.message
FROM runs r CROSS JOIN LATERAL jsonb_array_elements(COALESCE(r.checkpoint->'messages', '[]'::jsonb))
  WITH ORDINALITY AS m (message, n);

UPDATE runs SET step = COALESCE((checkpoint->>'step')::integer, 0),
  pending = NULLIF(checkpoint->'pending', 'null'::jsonb),
  message_count = jsonb_array_length(COALESCE(checkpoint->'messages', '[]'::jsonb));

ALTER TABLE runs DROP COLUMN checkpoint;
