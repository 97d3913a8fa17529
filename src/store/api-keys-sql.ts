import { API_KEY_COLUMNS } from './api-key-rows.js';

/*
 * The API-key store's SQL, both dialects side by side (PostgreSQL `$n`, SQLite `?` or `@name`), so a
 * change to one is made beside the other; the conformance suite judges that both behave alike.
 */

export const INSERT = {
  postgres: `
INSERT INTO api_keys (key_id, key_hash, tenant_id, actor_id, role, created_by)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING ${API_KEY_COLUMNS}`,
  sqlite: `
INSERT INTO api_keys (key_id, key_hash, tenant_id, actor_id, role, created_at, created_by)
VALUES (@keyId, @keyHash, @tenantId, @actorId, @role, @at, @createdBy)
RETURNING ${API_KEY_COLUMNS}`,
} as const;

export const FIND_LIVE = {
  postgres: `SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`,
  sqlite: `SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL`,
} as const;

export const GET = {
  postgres: `SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE tenant_id = $1 AND key_id = $2`,
  sqlite: `SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE tenant_id = ? AND key_id = ?`,
} as const;

export const LIST = {
  postgres: `
SELECT ${API_KEY_COLUMNS} FROM api_keys
WHERE tenant_id = $1 AND ($3::timestamptz IS NULL OR (created_at, key_id) > ($3::timestamptz, $4::text))
ORDER BY created_at, key_id LIMIT $2`,
  sqlite: `
SELECT ${API_KEY_COLUMNS} FROM api_keys
WHERE tenant_id = @tenantId AND (@afterAt IS NULL OR (created_at, key_id) > (@afterAt, @afterId))
ORDER BY created_at, key_id LIMIT @limit`,
} as const;

export const REVOKE = {
  postgres: `
UPDATE api_keys SET revoked_at = oncely_now(), revoked_by = $3
WHERE tenant_id = $1 AND key_id = $2 AND revoked_at IS NULL
RETURNING ${API_KEY_COLUMNS}`,
  sqlite: `
UPDATE api_keys SET revoked_at = ?, revoked_by = ?
WHERE tenant_id = ? AND key_id = ? AND revoked_at IS NULL
RETURNING ${API_KEY_COLUMNS}`,
} as const;
