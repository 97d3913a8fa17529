import { z } from 'zod/v4';
import { OncelyError } from '../../errors/index.js';
import { createApiKey } from '../auth/api-keys.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { cursorTime, decodeCursor, pageOf } from '../cursor.js';
import { toApiKey } from '../present.js';
import { authErrors, page } from '../schemas/common.js';
import {
  apiKeySchema,
  createKeyBody,
  createdKeySchema,
  keyIdSchema,
  listKeysQuery,
} from '../schemas/api-keys.js';

const tags = ['api keys'];
const keyCursor = z.strictObject({ at: cursorTime, key_id: keyIdSchema });

export function apiKeyRoutes(app: ApiApp, ctx: ApiContext): void {
  meRoute(app);
  listRoute(app, ctx);
  createRoute(app, ctx);
  revokeRoute(app, ctx);
}

/** The key a request is made with: its tenant, actor and role (what a console may show and offer). */
function meRoute(app: ApiApp): void {
  app.get(
    '/v1/me',
    {
      config: { role: 'viewer' },
      schema: {
        summary: 'The API key of this request: its tenant, actor id and role',
        tags,
        security: BEARER,
        response: { 200: apiKeySchema, ...authErrors },
      },
    },
    (request) => Promise.resolve(toApiKey(principal(request))),
  );
}

function listRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/api-keys',
    {
      config: { role: 'admin' },
      schema: {
        summary: "The tenant's API keys, revoked ones included (never the keys themselves)",
        tags,
        security: BEARER,
        querystring: listKeysQuery,
        response: { 200: page(apiKeySchema), ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const after = decodeCursor(keyCursor, request.query.cursor);
      const keys = await ctx.store.apiKeys.list(tenantId, {
        limit: request.query.limit,
        ...(after === undefined ? {} : { after: { at: after.at, keyId: after.key_id } }),
      });
      return pageOf(keys, request.query.limit, toApiKey, (k) => ({ at: k.createdAt, key_id: k.keyId }));
    },
  );
}

function createRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/api-keys',
    {
      config: { role: 'admin' },
      schema: {
        summary: 'Create a key in this tenant; the answer shows it once',
        tags,
        security: BEARER,
        body: createKeyBody,
        response: { 201: createdKeySchema, ...authErrors },
      },
    },
    async (request, reply) => {
      const { tenantId, actorId } = principal(request);
      const { key, record } = await createApiKey(ctx.store.apiKeys, {
        tenantId,
        actorId: request.body.actor_id,
        role: request.body.role,
        createdBy: actorId,
      });
      // Who minted the key, beside whom it acts as: a key for another actor is never anonymous.
      request.log.info(
        { keyId: record.keyId, role: record.role, for: record.actorId, createdBy: record.createdBy },
        'api key created',
      );
      return reply.code(201).send({ key, api_key: toApiKey(record) });
    },
  );
}

function revokeRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/api-keys/:key_id/revoke',
    {
      config: { role: 'admin' },
      schema: {
        summary: 'Revoke a key of this tenant; requests with it answer 401 from now on',
        tags,
        security: BEARER,
        params: z.strictObject({ key_id: keyIdSchema }),
        response: { 200: apiKeySchema, ...authErrors },
      },
    },
    async (request) => {
      const { tenantId, actorId } = principal(request);
      const { key_id: keyId } = request.params;
      const revoked = await ctx.store.apiKeys.revoke(tenantId, keyId, actorId);
      if (revoked === undefined) {
        throw new OncelyError(
          'API_KEY_NOT_FOUND',
          `no live key ${keyId} in this tenant (unknown, or already revoked)`,
        );
      }
      request.log.info({ keyId }, 'api key revoked');
      return toApiKey(revoked);
    },
  );
}
