/** What a key may do: viewers read; operators also decide; admins also manage keys. */
export const API_KEY_ROLES = ['viewer', 'operator', 'admin'] as const;
export type ApiKeyRole = (typeof API_KEY_ROLES)[number];

/** An API key as stored: never the key itself, only its SHA-256. */
export interface ApiKeyRecord {
  /** The public id (`key_…`), also the middle part of the key, so a key can be recognised in a list. */
  readonly keyId: string;
  /** Every request made with the key is scoped to this tenant. */
  readonly tenantId: string;
  /** Who acts with the key: recorded as the operator in the ledger. */
  readonly actorId: string;
  readonly role: ApiKeyRole;
  readonly createdAt: string;
  /** The actor who created it (`null` when created with `oncely keys create`). */
  readonly createdBy: string | null;
  readonly revokedAt: string | null;
  readonly revokedBy: string | null;
}

export interface NewApiKey {
  readonly keyId: string;
  /** SHA-256 (hex) of the whole key. */
  readonly keyHash: string;
  readonly tenantId: string;
  readonly actorId: string;
  readonly role: ApiKeyRole;
  readonly createdBy: string | null;
}

export interface ApiKeyListFilter {
  readonly limit: number;
  /** Keys strictly after this position in (createdAt, keyId) order. */
  readonly after?: { readonly at: string; readonly keyId: string };
}

/** API keys, each bound to one tenant, one actor id and one role. */
export interface ApiKeyStore {
  create(key: NewApiKey): Promise<ApiKeyRecord>;
  /** The live (not revoked) key with this hash: how a request is authenticated. */
  findByHash(keyHash: string): Promise<ApiKeyRecord | undefined>;
  get(tenantId: string, keyId: string): Promise<ApiKeyRecord | undefined>;
  /** A tenant's keys, revoked ones included, in (createdAt, keyId) order. */
  list(tenantId: string, filter: ApiKeyListFilter): Promise<ApiKeyRecord[]>;
  /** Revokes a live key of the tenant, compare-and-set; undefined when there was no live key to revoke. */
  revoke(tenantId: string, keyId: string, actorId: string): Promise<ApiKeyRecord | undefined>;
}
