-- The receiving side's idempotency keys (src/receiver/key-store.ts). Times are milliseconds since
-- the epoch, from the store's clock.
CREATE TABLE oncely_receiver_keys (
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('started', 'completed', 'failed', 'unknown')),
  fingerprint TEXT NOT NULL,
  subject TEXT,
  token TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  response TEXT,
  error TEXT,
  started_at INTEGER NOT NULL,
  settled_at INTEGER,
  PRIMARY KEY (scope, key)
) WITHOUT ROWID;

-- The purge of expired keys walks only settled ones, oldest first.
CREATE INDEX oncely_receiver_keys_settled ON oncely_receiver_keys (settled_at)
  WHERE status IN ('completed', 'failed');
