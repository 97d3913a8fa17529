import { createHash, randomBytes } from 'node:crypto';
import { OncelyError } from '../../errors/index.js';
import { assertTenantId, isValidId } from '../../ledger/index.js';
import { API_KEY_ROLES, type ApiKeyRecord, type ApiKeyRole, type ApiKeyStore } from '../../store/index.js';

/** `oncely_<12 hex: the key id>_<43 base64url: 256 random bits>`. */
const KEY_PATTERN = /^oncely_([0-9a-f]{12})_[A-Za-z0-9_-]{43}$/;

/** The SHA-256 (hex) of a key: all the database keeps. A 256-bit random key needs no slow hash. */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** True when the text has the shape of a key (so garbage never reaches the database). */
export function looksLikeApiKey(text: string): boolean {
  return KEY_PATTERN.test(text);
}

/** A key, or the start of one (a key cut short is most of a secret still), anywhere in a text. */
const KEY_INSIDE = /oncely_[0-9a-f]{12}_[A-Za-z0-9_-]/i;

/** True when a key, whole or cut short, appears anywhere in the text (what logs must not show). */
export function containsApiKey(text: string): boolean {
  return KEY_INSIDE.test(text);
}

export interface CreateApiKeyRequest {
  readonly tenantId: string;
  readonly actorId: string;
  readonly role: ApiKeyRole;
  /** The admin creating it over the API; null from `oncely keys create`. */
  readonly createdBy?: string | null;
}

/**
 * Mints a key, stores only its hash, and returns the key (shown once) with its record.
 *
 * @example
 * const { key } = await createApiKey(store.apiKeys, { tenantId: 'acme', actorId: 'ops-ana', role: 'operator' });
 */
export async function createApiKey(
  keys: ApiKeyStore,
  request: CreateApiKeyRequest,
): Promise<{ key: string; record: ApiKeyRecord }> {
  assertTenantId(request.tenantId);
  if (!isValidId(request.actorId)) {
    throw new OncelyError(
      'LEDGER_ACTOR_INVALID',
      `actor id ${JSON.stringify(request.actorId)} is not valid; use 1-128 characters of A-Z a-z 0-9 _ . -`,
    );
  }
  if (!(API_KEY_ROLES as readonly string[]).includes(request.role)) {
    throw new OncelyError(
      'API_REQUEST_INVALID',
      `role ${JSON.stringify(request.role)} is not one of ${API_KEY_ROLES.join(', ')}`,
    );
  }
  const id = randomBytes(6).toString('hex');
  const key = `oncely_${id}_${randomBytes(32).toString('base64url')}`;
  const record = await keys.create({
    keyId: `key_${id}`,
    keyHash: hashApiKey(key),
    tenantId: request.tenantId,
    actorId: request.actorId,
    role: request.role,
    createdBy: request.createdBy ?? null,
  });
  return { key, record };
}

const RANK: Record<ApiKeyRole, number> = { viewer: 0, operator: 1, admin: 2 };

/** Viewers read; operators also decide; admins also manage keys. */
export function roleAllows(has: ApiKeyRole, needs: ApiKeyRole): boolean {
  return RANK[has] >= RANK[needs];
}
