-- API keys: each bound to one tenant, one actor id and one role. Only the SHA-256 of a key is kept;
-- the key itself is shown once, when it is created.
CREATE TABLE api_keys (
  key_id     text        NOT NULL PRIMARY KEY,
  key_hash   text        NOT NULL UNIQUE,
  tenant_id  text        NOT NULL,
  actor_id   text        NOT NULL,
  role       text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
  created_at timestamptz NOT NULL DEFAULT oncely_now(),
  created_by text,
  revoked_at timestamptz,
  revoked_by text
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at, key_id);

-- Keys are revoked, never deleted: the ledger names their actors.
CREATE TRIGGER api_keys_no_delete BEFORE DELETE ON api_keys
  FOR EACH ROW EXECUTE FUNCTION oncely_refuse_change();
