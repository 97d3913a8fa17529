import type { ApiKeyRecord, ApiKeyRole } from './api-key-store.js';

type Time = string | Date;

export interface ApiKeyRow {
  key_id: string;
  tenant_id: string;
  actor_id: string;
  role: string;
  created_at: Time;
  created_by: string | null;
  revoked_at: Time | null;
  revoked_by: string | null;
}

const time = (value: Time): string => (typeof value === 'string' ? value : value.toISOString());

export function toApiKey(row: ApiKeyRow): ApiKeyRecord {
  return {
    keyId: row.key_id,
    tenantId: row.tenant_id,
    actorId: row.actor_id,
    role: row.role as ApiKeyRole,
    createdAt: time(row.created_at),
    createdBy: row.created_by,
    revokedAt: row.revoked_at === null ? null : time(row.revoked_at),
    revokedBy: row.revoked_by,
  };
}

/** The columns every key query returns: never `key_hash`. */
export const API_KEY_COLUMNS =
  'key_id, tenant_id, actor_id, role, created_at, created_by, revoked_at, revoked_by';
