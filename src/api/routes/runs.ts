import { z } from 'zod/v4';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { cursorTime, decodeCursor, pageOf } from '../cursor.js';
import { toRun } from '../present.js';
import { authErrors, errorEnvelopeSchema, page, runIdSchema } from '../schemas/common.js';
import { cancelRunBody, createRunBody, listRunsQuery, retryRunBody, runSchema } from '../schemas/runs.js';

const tags = ['runs'];
const params = z.strictObject({ run_id: runIdSchema });
const runCursor = z.strictObject({ at: cursorTime, run_id: runIdSchema });

export function runRoutes(app: ApiApp, ctx: ApiContext): void {
  createRoute(app, ctx);
  listRoute(app, ctx);
  showRoute(app, ctx);
  cancelRoute(app, ctx);
  retryRoute(app, ctx);
}

function retryRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/runs/:run_id/retry',
    {
      config: { role: 'operator' },
      schema: {
        summary: 'Re-drive a failed run from its last checkpoint',
        description:
          'The run is queued again with its error and counters cleared; a worker drives it from its last ' +
          'checkpoint. Keys stay stable: completed calls replay, unknown ones are asked of their hooks, ' +
          'nothing that took effect runs again. A run that is not failed answers 409 RUN_NOT_RETRYABLE.',
        tags,
        security: BEARER,
        params,
        body: retryRunBody,
        response: { 200: runSchema, ...authErrors, 409: errorEnvelopeSchema },
      },
    },
    async (request) => {
      const { tenantId, actorId } = principal(request);
      const { run_id: runId } = request.params;
      const run = await ctx.runtime.retry(tenantId, runId, { reason: request.body.reason, actorId });
      request.log.info({ runId }, 'operator retried a failed run');
      return toRun(run);
    },
  );
}

function createRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/runs',
    {
      config: { role: 'operator' },
      schema: {
        summary: 'Start a run (queued; a worker drives it)',
        description:
          'With run_id, creation is idempotent: the same agent and input answer 200 with the run that ' +
          'stands; another agent or input answers 409 RUN_CONFLICT.',
        tags,
        security: BEARER,
        body: createRunBody,
        response: {
          200: runSchema.describe('The run already existed with this agent and input'),
          201: runSchema.describe('The run was created'),
          ...authErrors,
          409: errorEnvelopeSchema,
          422: errorEnvelopeSchema,
        },
      },
    },
    async (request, reply) => {
      const { tenantId } = principal(request);
      const body = request.body;
      const { created, run } = await ctx.runtime.startRun({
        tenantId,
        agent: body.agent,
        input: body.input,
        ...(body.run_id === undefined ? {} : { runId: body.run_id }),
      });
      if (created) request.log.info({ runId: run.runId, agent: run.agent }, 'run created');
      return reply.code(created ? 201 : 200).send(toRun(run));
    },
  );
}

function listRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/runs',
    {
      config: { role: 'viewer' },
      schema: {
        summary: "The tenant's runs, oldest first; filter by status and agent",
        tags,
        security: BEARER,
        querystring: listRunsQuery,
        response: { 200: page(runSchema), ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const q = request.query;
      const after = decodeCursor(runCursor, q.cursor);
      const runs = await ctx.store.runs.list(tenantId, {
        limit: q.limit,
        ...(q.status === undefined ? {} : { statuses: [q.status] }),
        ...(q.agent === undefined ? {} : { agent: q.agent }),
        ...(after === undefined ? {} : { after: { at: after.at, runId: after.run_id } }),
      });
      return pageOf(runs, q.limit, toRun, (r) => ({ at: r.createdAt, run_id: r.runId }));
    },
  );
}

function showRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/runs/:run_id',
    {
      config: { role: 'viewer' },
      schema: {
        summary: 'One run',
        tags,
        security: BEARER,
        params,
        response: { 200: runSchema, ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      return toRun(await ctx.runtime.getRunSummary(tenantId, request.params.run_id));
    },
  );
}

function cancelRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/runs/:run_id/cancel',
    {
      config: { role: 'operator' },
      schema: {
        summary: 'Cancel a run that has not ended; whoever drives it stands down. Nothing is compensated.',
        tags,
        security: BEARER,
        params,
        body: cancelRunBody,
        response: { 200: runSchema, ...authErrors, 409: errorEnvelopeSchema },
      },
    },
    async (request) => {
      const { tenantId, actorId } = principal(request);
      const { run_id: runId } = request.params;
      const run = await ctx.runtime.cancel(tenantId, runId, { reason: request.body.reason, actorId });
      request.log.info({ runId }, 'operator cancelled a run');
      return toRun(run);
    },
  );
}
