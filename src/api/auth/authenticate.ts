import type { FastifyRequest } from 'fastify';
import { OncelyError } from '../../errors/index.js';
import type { ApiKeyRecord, ApiKeyRole, ApiKeyStore } from '../../store/index.js';
import { hashApiKey, looksLikeApiKey, roleAllows } from './api-keys.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The least role a key needs for this route; routes without one are public. */
    role?: ApiKeyRole;
  }
  interface FastifyRequest {
    /** The key a request was made with, once authenticated. */
    principal: ApiKeyRecord | null;
  }
}

const HOW_TO_GET_A_KEY =
  'an admin creates one with `oncely keys create --tenant TENANT --actor YOUR_ID --role viewer|operator|admin`';

/**
 * The `onRequest` hook: a route that names a role needs `Authorization: Bearer <key>` of a live key
 * with at least that role. Runs before the body is read, so a refused request costs no parsing.
 */
export function authenticator(keys: ApiKeyStore) {
  return async (request: FastifyRequest): Promise<void> => {
    const needs = request.routeOptions.config.role;
    if (needs === undefined) return;
    const principal = await principalOf(keys, request.headers.authorization);
    if (!roleAllows(principal.role, needs)) {
      throw new OncelyError(
        'API_FORBIDDEN',
        `this key's role is ${principal.role}; ${request.method} ${request.routeOptions.url ?? ''} needs ${needs}`,
      );
    }
    request.principal = principal;
    request.log = request.log.child({ tenantId: principal.tenantId, actorId: principal.actorId });
  };
}

async function principalOf(keys: ApiKeyStore, header: string | undefined): Promise<ApiKeyRecord> {
  if (header === undefined || header.trim() === '') {
    throw new OncelyError(
      'API_AUTH_REQUIRED',
      `send your API key as "Authorization: Bearer <key>"; ${HOW_TO_GET_A_KEY}`,
    );
  }
  const match = /^Bearer +(\S+) *$/i.exec(header);
  const key = match?.[1];
  const record =
    key !== undefined && looksLikeApiKey(key) ? await keys.findByHash(hashApiKey(key)) : undefined;
  if (record === undefined) {
    throw new OncelyError(
      'API_KEY_INVALID',
      `the API key is not valid (unknown, revoked, or not of the form oncely_…); ${HOW_TO_GET_A_KEY}`,
    );
  }
  return record;
}

/** The key of an authenticated request; routes with a role always have one. */
export function principal(request: FastifyRequest): ApiKeyRecord {
  if (request.principal === null) throw new Error('route has no role, so no principal');
  return request.principal;
}
