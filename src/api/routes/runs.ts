import { z } from 'zod/v4';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { cursorTime, decodeCursor, pageOf } from '../cursor.js';
import { toRun, toTurn, toUsage } from '../present.js';
import { uiMessages } from '../../runs/conversation.js';
import { authErrors, errorEnvelopeSchema, page, runIdSchema } from '../schemas/common.js';
import {
  cancelRunBody,
  createRunBody,
  listRunsQuery,
  messagesQuery,
  messagesSchema,
  retryRunBody,
  runSchema,
  sendMessageBody,
  sentMessageSchema,
  tenantUsageSchema,
  usageQuery,
} from '../schemas/runs.js';

const tags = ['runs'];
const params = z.strictObject({ run_id: runIdSchema });
const runCursor = z.strictObject({ at: cursorTime, run_id: runIdSchema });

export function runRoutes(app: ApiApp, ctx: ApiContext): void {
  createRoute(app, ctx);
  listRoute(app, ctx);
  showRoute(app, ctx);
  cancelRoute(app, ctx);
  retryRoute(app, ctx);
  sendMessageRoute(app, ctx);
  messagesRoute(app, ctx);
  usageRoute(app, ctx);
}

function sendMessageRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/runs/:run_id/messages',
    {
      config: { role: 'operator' },
      schema: {
        summary: 'Send the next user message to a run that has answered: its next turn',
        description:
          'The message is appended to the conversation and the run is queued for its next turn, in one ' +
          'write; a worker answers it with the same durability, ordering and keys as the first turn. ' +
          'The same client_message_id again answers 200 with that turn (nothing appended); with other ' +
          'content it answers 409 RUN_MESSAGE_CONFLICT. A run that has not answered yet (or failed, or ' +
          'was cancelled) answers 409 RUN_NOT_AWAITING_MESSAGE.',
        tags,
        security: BEARER,
        params,
        body: sendMessageBody,
        response: {
          200: sentMessageSchema.describe('This message was sent before: its turn, and the run now'),
          201: sentMessageSchema.describe('The message was taken: the run is queued for its turn'),
          ...authErrors,
          409: errorEnvelopeSchema,
          422: errorEnvelopeSchema,
        },
      },
    },
    async (request, reply) => {
      const { tenantId, actorId } = principal(request);
      const { run_id: runId } = request.params;
      const sent = await ctx.runtime.send({
        tenantId,
        runId,
        content: request.body.content,
        clientMessageId: request.body.client_message_id,
        actorId,
      });
      if (sent.sent) request.log.info({ runId, turn: sent.turn.turn }, 'message sent to a run');
      return reply.code(sent.sent ? 201 : 200).send({ turn: toTurn(sent.turn), run: toRun(sent.run) });
    },
  );
}

function messagesRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/runs/:run_id/messages',
    {
      config: { role: 'viewer' },
      schema: {
        summary: "A run's conversation, as AI SDK model messages or UI messages",
        tags,
        security: BEARER,
        params,
        querystring: messagesQuery,
        response: { 200: messagesSchema, ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const { run_id: runId } = request.params;
      const run = await ctx.runtime.getRun(tenantId, runId);
      const turns = await ctx.store.runs.turns(tenantId, runId);
      const { format } = request.query;
      return {
        format,
        messages: format === 'ui' ? uiMessages(run.runId, run.checkpoint.messages) : run.checkpoint.messages,
        turns: turns.map(toTurn),
      };
    },
  );
}

function usageRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/usage',
    {
      config: { role: 'viewer' },
      schema: {
        summary: "What the tenant's runs cost in tokens, in all and by agent",
        description:
          'The tokens of every model response the runs kept, summed over the runs created in [from, to) ' +
          '(all of them without a window).',
        tags,
        security: BEARER,
        querystring: usageQuery,
        response: { 200: tenantUsageSchema, ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const { from, to } = request.query;
      const usage = await ctx.runtime.usage(tenantId, {
        ...(from === undefined ? {} : { from: new Date(from).toISOString() }),
        ...(to === undefined ? {} : { to: new Date(to).toISOString() }),
      });
      return {
        tenant_id: tenantId,
        runs: usage.runs,
        usage: toUsage(usage.usage),
        by_agent: usage.byAgent.map((a) => ({ agent: a.agent, runs: a.runs, usage: toUsage(a.usage) })),
      };
    },
  );
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
        ...(body.token_budget === undefined ? {} : { tokenBudget: body.token_budget }),
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
