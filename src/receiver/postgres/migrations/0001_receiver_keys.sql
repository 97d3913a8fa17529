-- The receiving side's idempotency keys (src/receiver/key-store.ts). Times are the server's.
CREATE TABLE oncely_receiver_keys (
  scope text NOT NULL,
  key text NOT NULL,
  status text NOT NULL CHECK (status IN ('started', 'completed', 'failed', 'unknown')),
  fingerprint text NOT NULL,
  subject text,
  token text NOT NULL,
  attempt integer NOT NULL,
  response jsonb,
  error text,
  started_at timestamptz NOT NULL DEFAULT now(),
  settled_at timestamptz,
  PRIMARY KEY (scope, key)
);

-- The purge of expired keys walks only settled ones, oldest first.
CREATE INDEX oncely_receiver_keys_settled ON oncely_receiver_keys (settled_at)
  WHERE status IN ('completed', 'failed');
