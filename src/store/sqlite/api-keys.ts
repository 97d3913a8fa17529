import type Database from 'better-sqlite3';
import { API_KEY_COLUMNS, toApiKey, type ApiKeyRow } from '../api-key-rows.js';
import type { ApiKeyListFilter, ApiKeyRecord, ApiKeyStore, NewApiKey } from '../api-key-store.js';
import { settle } from './settle.js';

const INSERT = `
INSERT INTO api_keys (key_id, key_hash, tenant_id, actor_id, role, created_at, created_by)
VALUES (@keyId, @keyHash, @tenantId, @actorId, @role, @at, @createdBy)
RETURNING ${API_KEY_COLUMNS}`;
const FIND_LIVE = `SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL`;
const GET = `SELECT ${API_KEY_COLUMNS} FROM api_keys WHERE tenant_id = ? AND key_id = ?`;
const LIST = `
SELECT ${API_KEY_COLUMNS} FROM api_keys
WHERE tenant_id = @tenantId AND (@afterAt IS NULL OR (created_at, key_id) > (@afterAt, @afterId))
ORDER BY created_at, key_id LIMIT @limit`;
const REVOKE = `
UPDATE api_keys SET revoked_at = ?, revoked_by = ?
WHERE tenant_id = ? AND key_id = ? AND revoked_at IS NULL
RETURNING ${API_KEY_COLUMNS}`;

/** API keys on one better-sqlite3 connection; each method is one statement. */
export class SqliteApiKeys implements ApiKeyStore {
  constructor(private readonly db: Database.Database) {}

  create(key: NewApiKey): Promise<ApiKeyRecord> {
    return settle(() => {
      const row = this.db
        .prepare<[Record<string, unknown>], ApiKeyRow>(INSERT)
        .get({ ...key, at: new Date().toISOString() });
      if (row === undefined) throw new Error(`api key ${key.keyId} was not inserted`);
      return toApiKey(row);
    });
  }

  findByHash(keyHash: string): Promise<ApiKeyRecord | undefined> {
    return settle(() => {
      const row = this.db.prepare<[string], ApiKeyRow>(FIND_LIVE).get(keyHash);
      return row === undefined ? undefined : toApiKey(row);
    });
  }

  get(tenantId: string, keyId: string): Promise<ApiKeyRecord | undefined> {
    return settle(() => {
      const row = this.db.prepare<[string, string], ApiKeyRow>(GET).get(tenantId, keyId);
      return row === undefined ? undefined : toApiKey(row);
    });
  }

  list(tenantId: string, filter: ApiKeyListFilter): Promise<ApiKeyRecord[]> {
    return settle(() =>
      this.db
        .prepare<[Record<string, unknown>], ApiKeyRow>(LIST)
        .all({
          tenantId,
          limit: filter.limit,
          afterAt: filter.after?.at ?? null,
          afterId: filter.after?.keyId ?? null,
        })
        .map(toApiKey),
    );
  }

  revoke(tenantId: string, keyId: string, actorId: string): Promise<ApiKeyRecord | undefined> {
    return settle(() => {
      const row = this.db
        .prepare<[string, string, string, string], ApiKeyRow>(REVOKE)
        .get(new Date().toISOString(), actorId, tenantId, keyId);
      return row === undefined ? undefined : toApiKey(row);
    });
  }
}
