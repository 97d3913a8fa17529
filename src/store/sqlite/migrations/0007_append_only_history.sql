-- A run's conversation is append-only (see the PostgreSQL migration): one row per message, written
-- once; the runs row keeps the step counter, the pending calls of the step under way and how many
-- messages the run holds. Existing checkpoints move here.
CREATE TABLE run_messages (
  tenant_id TEXT    NOT NULL,
  run_id    TEXT    NOT NULL,
  idx       INTEGER NOT NULL CHECK (idx >= 0),
  message   TEXT    NOT NULL,
  PRIMARY KEY (tenant_id, run_id, idx)
) STRICT, WITHOUT ROWID;
CREATE TRIGGER run_messages_append_only_update BEFORE UPDATE ON run_messages
BEGIN SELECT RAISE(ABORT, 'run_messages is append-only'); END;
CREATE TRIGGER run_messages_append_only_delete BEFORE DELETE ON run_messages
BEGIN SELECT RAISE(ABORT, 'run_messages is append-only'); END;

ALTER TABLE runs ADD COLUMN step INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN pending TEXT;
ALTER TABLE runs ADD COLUMN message_count INTEGER NOT NULL DEFAULT 0;

INSERT INTO run_messages (tenant_id, run_id, idx, message)
SELECT r.tenant_id, r.run_id, m.key, m.value
FROM runs r, json_each(r.checkpoint, '$.messages') AS m;

UPDATE runs SET step = COALESCE(json_extract(checkpoint, '$.step'), 0),
  pending = json_extract(checkpoint, '$.pending'),
  message_count = COALESCE(json_array_length(checkpoint, '$.messages'), 0);

ALTER TABLE runs DROP COLUMN checkpoint;
