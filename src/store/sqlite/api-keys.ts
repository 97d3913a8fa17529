import type Database from 'better-sqlite3';
import { toApiKey, type ApiKeyRow } from '../api-key-rows.js';
import { FIND_LIVE, GET, INSERT, LIST, REVOKE } from '../api-keys-sql.js';
import type { ApiKeyListFilter, ApiKeyRecord, ApiKeyStore, NewApiKey } from '../api-key-store.js';
import { isoNow, type Clock } from '../../util/clock.js';
import { settle } from './settle.js';

/** API keys on one better-sqlite3 connection; each method is one statement. */
export class SqliteApiKeys implements ApiKeyStore {
  constructor(
    private readonly db: Database.Database,
    private readonly clock: Clock,
  ) {}

  create(key: NewApiKey): Promise<ApiKeyRecord> {
    return settle(() => {
      const row = this.db
        .prepare<[Record<string, unknown>], ApiKeyRow>(INSERT.sqlite)
        .get({ ...key, at: isoNow(this.clock) });
      if (row === undefined) throw new Error(`api key ${key.keyId} was not inserted`);
      return toApiKey(row);
    });
  }

  findByHash(keyHash: string): Promise<ApiKeyRecord | undefined> {
    return settle(() => {
      const row = this.db.prepare<[string], ApiKeyRow>(FIND_LIVE.sqlite).get(keyHash);
      return row === undefined ? undefined : toApiKey(row);
    });
  }

  get(tenantId: string, keyId: string): Promise<ApiKeyRecord | undefined> {
    return settle(() => {
      const row = this.db.prepare<[string, string], ApiKeyRow>(GET.sqlite).get(tenantId, keyId);
      return row === undefined ? undefined : toApiKey(row);
    });
  }

  list(tenantId: string, filter: ApiKeyListFilter): Promise<ApiKeyRecord[]> {
    return settle(() =>
      this.db
        .prepare<[Record<string, unknown>], ApiKeyRow>(LIST.sqlite)
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
        .prepare<[string, string, string, string], ApiKeyRow>(REVOKE.sqlite)
        .get(isoNow(this.clock), actorId, tenantId, keyId);
      return row === undefined ? undefined : toApiKey(row);
    });
  }
}
