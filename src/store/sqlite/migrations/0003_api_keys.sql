-- API keys: each bound to one tenant, one actor id and one role. Only the SHA-256 of a key is kept;
-- the key itself is shown once, when it is created.
CREATE TABLE api_keys (
  key_id     TEXT NOT NULL PRIMARY KEY,
  key_hash   TEXT NOT NULL UNIQUE,
  tenant_id  TEXT NOT NULL,
  actor_id   TEXT NOT NULL,
  role       TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
  created_at TEXT NOT NULL,
  created_by TEXT,
  revoked_at TEXT,
  revoked_by TEXT
) STRICT;
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at, key_id);

-- Keys are revoked, never deleted: the ledger names their actors.
CREATE TRIGGER api_keys_no_delete BEFORE DELETE ON api_keys
BEGIN SELECT RAISE(ABORT, 'api_keys are revoked, never deleted'); END;
