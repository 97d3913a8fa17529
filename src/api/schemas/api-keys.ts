import { z } from 'zod/v4';
import { API_KEY_ROLES } from '../../store/index.js';
import { actorIdSchema, cursorSchema, limitSchema } from './common.js';

export const apiKeySchema = z
  .object({
    key_id: z.string(),
    tenant_id: z.string(),
    actor_id: z.string().describe('Recorded as the operator of every decision made with the key'),
    role: z.enum(API_KEY_ROLES),
    created_at: z.string(),
    created_by: z.string().nullable(),
    revoked_at: z.string().nullable(),
    revoked_by: z.string().nullable(),
  })
  .meta({ id: 'ApiKey' });

export const keyIdSchema = z.string().regex(/^key_[0-9a-f]{12}$/, 'a key id looks like key_0123456789ab');

export const createKeyBody = z.strictObject({ actor_id: actorIdSchema, role: z.enum(API_KEY_ROLES) });

export const createdKeySchema = z.object({
  key: z.string().describe('The key itself; shown once, never stored'),
  api_key: apiKeySchema,
});

export const listKeysQuery = z.strictObject({ limit: limitSchema, cursor: cursorSchema });
