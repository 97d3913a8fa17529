import { toApiKey, type ApiKeyRow } from '../api-key-rows.js';
import { FIND_LIVE, GET, INSERT, LIST, REVOKE } from '../api-keys-sql.js';
import type { ApiKeyListFilter, ApiKeyRecord, ApiKeyStore, NewApiKey } from '../api-key-store.js';
import type { Queryable } from './ledger.js';

/** API keys on PostgreSQL; each method is one statement. */
export class PostgresApiKeys implements ApiKeyStore {
  constructor(private readonly db: Queryable) {}

  async create(key: NewApiKey): Promise<ApiKeyRecord> {
    const { rows } = await this.db.query<ApiKeyRow>(INSERT.postgres, [
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
    const { rows } = await this.db.query<ApiKeyRow>(FIND_LIVE.postgres, [keyHash]);
    return rows[0] === undefined ? undefined : toApiKey(rows[0]);
  }

  async get(tenantId: string, keyId: string): Promise<ApiKeyRecord | undefined> {
    const { rows } = await this.db.query<ApiKeyRow>(GET.postgres, [tenantId, keyId]);
    return rows[0] === undefined ? undefined : toApiKey(rows[0]);
  }

  async list(tenantId: string, filter: ApiKeyListFilter): Promise<ApiKeyRecord[]> {
    const { rows } = await this.db.query<ApiKeyRow>(LIST.postgres, [
      tenantId,
      filter.limit,
      filter.after?.at ?? null,
      filter.after?.keyId ?? null,
    ]);
    return rows.map(toApiKey);
  }

  async revoke(tenantId: string, keyId: string, actorId: string): Promise<ApiKeyRecord | undefined> {
    const { rows } = await this.db.query<ApiKeyRow>(REVOKE.postgres, [tenantId, keyId, actorId]);
    return rows[0] === undefined ? undefined : toApiKey(rows[0]);
  }
}
