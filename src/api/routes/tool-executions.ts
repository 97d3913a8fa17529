import { z } from 'zod/v4';
import { OncelyError } from '../../errors/index.js';
import { getToolCall, listUnknownCalls, unknownCallCursor } from '../../calls/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { cursorTime, decodeCursor, pageOf } from '../cursor.js';
import { toLedgerEvent, toToolExecution } from '../present.js';
import { authErrors, executionKeySchema, errorEnvelopeSchema, page } from '../schemas/common.js';
import {
  compensateBody,
  compensationSchema,
  listExecutionsQuery,
  resolveBody,
  toolExecutionSchema,
  toolExecutionWithHistorySchema,
} from '../schemas/tool-executions.js';

const tags = ['tool executions'];
const params = z.strictObject({ key: executionKeySchema });
const executionCursor = z.strictObject({ at: cursorTime, key: executionKeySchema });
const conflict = { 409: errorEnvelopeSchema };

export function toolExecutionRoutes(app: ApiApp, ctx: ApiContext): void {
  listRoute(app, ctx);
  showRoute(app, ctx);
  resolveRoute(app, ctx);
  compensateRoute(app, ctx);
}

function listRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/tool-executions',
    {
      config: { role: 'viewer' },
      schema: {
        summary: "The tenant's tool calls; by default its unknown ones, longest waiting first",
        tags,
        security: BEARER,
        querystring: listExecutionsQuery,
        response: { 200: page(toolExecutionSchema), ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const q = request.query;
      const after = decodeCursor(executionCursor, q.cursor);
      const filter = {
        limit: q.limit,
        ...(q.run_id === undefined ? {} : { runId: q.run_id }),
        ...(q.tool === undefined ? {} : { toolName: q.tool }),
        ...(after === undefined ? {} : { after }),
      };
      if (q.status === 'unknown') {
        // Longest unknown first, by the deadline of the last attempt (the cursor holds it).
        const unknown = await listUnknownCalls(ctx.runtime.ledger, tenantId, filter);
        return pageOf(unknown, q.limit, toToolExecution, (r) => ({ ...unknownCallCursor(r) }));
      }
      const records = await ctx.store.ledger.list(tenantId, {
        ...filter,
        ...(q.status === 'all'
          ? {}
          : q.status === 'conflict'
            ? { conflict: true }
            : { statuses: [q.status] }),
      });
      return pageOf(records, q.limit, toToolExecution, (r) => ({
        at: r.attemptStartedAt,
        key: r.idempotencyKey,
      }));
    },
  );
}

function showRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/tool-executions/:key',
    {
      config: { role: 'viewer' },
      schema: {
        summary: 'One tool call with its whole history',
        tags,
        security: BEARER,
        params,
        response: { 200: toolExecutionWithHistorySchema, ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const found = await getToolCall(ctx.runtime.ledger, tenantId, request.params.key);
      if (found === undefined) throw recordNotFound(request.params.key);
      return { record: toToolExecution(found.record), history: found.history.map(toLedgerEvent) };
    },
  );
}

function resolveRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/tool-executions/:key/resolve',
    {
      config: { role: 'operator' },
      schema: {
        summary: 'Settle an unknown call: it took effect (completed) or it did not (failed)',
        description:
          'Compare-and-set: of operators acting at once exactly one wins; a call already settled answers 409 ' +
          'LEDGER_ALREADY_SETTLED with the record as it stands. A started call whose attempt may still be ' +
          'running (its run held by a live worker, a compensation hook still running, or younger than its ' +
          'timeout plus a margin) answers 409 CALL_IN_FLIGHT unless force is true, which is recorded as ' +
          'forced. A run waiting in awaiting_reconciliation resumes.',
        tags,
        security: BEARER,
        params,
        body: resolveBody,
        response: { 200: toolExecutionSchema, ...authErrors, ...conflict },
      },
    },
    async (request) => {
      const { tenantId, actorId } = principal(request);
      const { key } = request.params;
      const body = request.body;
      const record = await ctx.runtime.resolve({
        tenantId,
        idempotencyKey: key,
        status: body.status,
        reason: body.reason,
        actorId,
        ...(body.result === undefined ? {} : { result: body.result }),
        ...(body.result_reference === undefined ? {} : { resultReference: body.result_reference }),
        ...(body.force === undefined ? {} : { force: body.force }),
      });
      request.log.info(
        {
          idempotencyKey: key,
          runId: record.runId,
          status: record.status,
          forced: body.force === true,
        },
        body.force === true ? 'operator resolved a tool call by force' : 'operator resolved a tool call',
      );
      return toToolExecution(record);
    },
  );
}

function compensateRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/tool-executions/:key/compensate',
    {
      config: { role: 'operator' },
      schema: {
        summary: "Undo a completed call with its tool's compensation hook, once",
        description:
          'Runs the hook as its own once-only call, <key>:compensation; asking twice runs it once. 409 ' +
          'LEDGER_NOT_COMPENSABLE unless the call is completed and its tool has a compensate hook.',
        tags,
        security: BEARER,
        params,
        body: compensateBody,
        response: { 200: compensationSchema, ...authErrors, ...conflict },
      },
    },
    async (request) => {
      const { tenantId, actorId } = principal(request);
      const { key } = request.params;
      const outcome = await ctx.runtime.compensate({
        tenantId,
        idempotencyKey: key,
        reason: request.body.reason,
        actorId,
      });
      request.log.info(
        { idempotencyKey: key, runId: outcome.record.runId, status: outcome.status },
        'operator compensated a tool call',
      );
      return {
        status: outcome.status,
        record: toToolExecution(outcome.record),
        compensation: toToolExecution(outcome.compensation),
      };
    },
  );
}

function recordNotFound(key: string): OncelyError {
  return new OncelyError('LEDGER_RECORD_NOT_FOUND', `no tool call ${key} in this tenant's ledger`, {
    details: { key },
  });
}
