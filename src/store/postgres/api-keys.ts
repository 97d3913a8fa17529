import { API_KEY_COLUMNS, toApiKey, type ApiKeyRow } from '../api-key-rows.js';
import type { ApiKeyListFilter, ApiKeyRecord, ApiKeyStore, NewApiKey } from '../api-key-store.js';
import type { Queryable } from './ledger.js';

const INSERT = `
INSERT INTO api_keys (key_id, key_hash, tenant_id, actor_id, role, created_by)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING ${API_KEY_COLUMNS}`;
const FIND_LIVE = `SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL`;
const GET = `SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE tenant_id = $1 AND key_id = $2`;
const LIST = `
SELECT ${API_KEY_COLUMNS} FROM api_keys
WHERE tenant_id = $1 AND ($3::timestamptz IS NULL OR (created_at, key_id) > ($3::timestamptz, $4::text))
ORDER BY created_at, key_id LIMIT $2`;
const REVOKE = `
UPDATE api_keys SET revoked_at = oncely_now(), revoked_by = $3
WHERE tenant_id = $1 AND key_id = $2 AND revoked_at IS NULL
RETURNING ${API_KEY_COLUMNS}`;

/** API keys on PostgreSQL; each method is one statement. */
export class PostgresApiKeys implements ApiKeyStore {
  constructor(private readonly db: Queryable) {}

  async create(key: NewApiKey): Promise<ApiKeyRecord> {
    const { rows } = await this.db.query<ApiKeyRow>(INSERT, [
      key.keyId,
      key.keyHash,
      key.tenantId,
      key.actorId,
      key.role,
      key.createdBy,
    ]);
    if (rows[0] === undefined) throw new Error(`api key ${key.keyId} was not inserted`);
    return toApiKey(rows[0]);
  }

  async findByHash(keyHash: string): Promise<ApiKeyRecord | undefined> {
    const { rows } = await this.db.query<ApiKeyRow>(FIND_LIVE, [keyHash]);
    return rows[0] === undefined ? undefined : toApiKey(rows[0]);
  }

  async get(tenantId: string, keyId: string): Promise<ApiKeyRecord | undefined> {
    const { rows } = await this.db.query<ApiKeyRow>(GET, [tenantId, keyId]);
    return rows[0] === undefined ? undefined : toApiKey(rows[0]);
  }

  async list(tenantId: string, filter: ApiKeyListFilter): Promise<ApiKeyRecord[]> {
    const { rows } = await this.db.query<ApiKeyRow>(LIST, [
      tenantId,
      filter.limit,
      filter.after?.at ?? null,
      filter.after?.keyId ?? null,
    ]);
    return rows.map(toApiKey);
  }

  async revoke(tenantId: string, keyId: string, actorId: string): Promise<ApiKeyRecord | undefined> {
    const { rows } = await this.db.query<ApiKeyRow>(REVOKE, [tenantId, keyId, actorId]);
    return rows[0] === undefined ? undefined : toApiKey(rows[0]);
  }
}
