import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod/v4';
import type { WorkflowEvent, WorkflowRunRecord } from '../../store/workflow-store.js';
import { isFinalWorkflowStatus, type WorkflowRunView } from '../../workflows/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { cursorTime, decodeCursor, pageOf } from '../cursor.js';
import { REVOKED_EVENT, keyRevoked, openStream } from '../event-stream.js';
import { authErrors, errorEnvelopeSchema, page } from '../schemas/common.js';
import {
  cancelWorkflowBody,
  decideWorkflowBody,
  listWorkflowRunsQuery,
  startWorkflowBody,
  workflowEventsQuery,
  workflowRunIdSchema,
  workflowRunSchema,
} from '../schemas/workflows.js';

const tags = ['workflows'];
const params = z.strictObject({ workflow_run_id: workflowRunIdSchema });
const cursor = z.strictObject({ at: cursorTime, id: workflowRunIdSchema });

/** A workflow run as the API shows it; with its nodes when read alone. */
export function toWorkflowRun(w: WorkflowRunRecord | WorkflowRunView): z.infer<typeof workflowRunSchema> {
  return {
    workflow_run_id: w.workflowRunId,
    workflow: w.workflow,
    tenant_id: w.tenantId,
    status: w.status,
    status_reason: w.statusReason,
    input: w.input,
    result: w.result,
    error: w.error,
    created_at: w.createdAt,
    updated_at: w.updatedAt,
    ...('nodes' in w
      ? {
          nodes: w.nodes.map((n) => ({
            name: n.name,
            agent: n.agent,
            state: n.state,
            reason: n.reason,
            attempts: n.attempts.map((a) => ({
              attempt: a.attempt,
              run_id: a.runId,
              status: a.run?.status ?? null,
            })),
            standing_calls: n.standingCalls.map((c) => ({
              idempotency_key: c.idempotencyKey,
              tool_name: c.toolName,
              status: c.status,
              conflict: c.conflict,
              result_reference: c.resultReference,
            })),
          })),
        }
      : {}),
  };
}

function toEvent(e: WorkflowEvent): Record<string, unknown> {
  return {
    id: e.id,
    at: e.at,
    kind: e.kind,
    node: e.node,
    attempt: e.attempt,
    run_id: e.runId,
    reason: e.reason,
    detail: e.detail,
  };
}

export function workflowRoutes(app: ApiApp, ctx: ApiContext): void {
  const engine = ctx.workflows;
  app.post(
    '/v1/workflow-runs',
    {
      config: { role: 'operator' },
      schema: {
        summary: 'Start a workflow run (a worker advances it)',
        description:
          'With workflow_run_id, starting is idempotent: the same workflow and input answer 200 with the ' +
          'workflow run that stands; another workflow or input answers 409 WORKFLOW_CONFLICT. An input ' +
          "that does not match the workflow's schema answers 400 WORKFLOW_INPUT_INVALID.",
        tags,
        security: BEARER,
        body: startWorkflowBody,
        response: {
          200: workflowRunSchema.describe('The workflow run already existed with this workflow and input'),
          201: workflowRunSchema.describe('The workflow run was started'),
          ...authErrors,
          409: errorEnvelopeSchema,
        },
      },
    },
    async (request, reply) => {
      const { tenantId } = principal(request);
      const { workflow, input, workflow_run_id: id } = request.body;
      const { created, workflowRun } = await engine.start({
        tenantId,
        workflow,
        input,
        ...(id === undefined ? {} : { workflowRunId: id }),
      });
      if (created)
        request.log.info({ workflowRunId: workflowRun.workflowRunId, workflow }, 'workflow run started');
      return reply.code(created ? 201 : 200).send(toWorkflowRun(workflowRun));
    },
  );
  app.get(
    '/v1/workflow-runs',
    {
      config: { role: 'viewer' },
      schema: {
        summary: "The tenant's workflow runs, newest first; filter by status and workflow",
        tags,
        security: BEARER,
        querystring: listWorkflowRunsQuery,
        response: { 200: page(workflowRunSchema), ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const q = request.query;
      const before = decodeCursor(cursor, q.cursor);
      const runs = await ctx.store.workflows.list(tenantId, {
        limit: q.limit,
        ...(q.status === undefined ? {} : { statuses: [q.status] }),
        ...(q.workflow === undefined ? {} : { workflow: q.workflow }),
        ...(before === undefined ? {} : { before: { createdAt: before.at, workflowRunId: before.id } }),
      });
      return pageOf(runs, q.limit, toWorkflowRun, (w) => ({ at: w.createdAt, id: w.workflowRunId }));
    },
  );
  app.get(
    '/v1/workflow-runs/:workflow_run_id',
    {
      config: { role: 'viewer' },
      schema: {
        summary: 'One workflow run, with each node: its state, its attempts and their runs',
        tags,
        security: BEARER,
        params,
        response: { 200: workflowRunSchema, ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      return toWorkflowRun(await engine.get(tenantId, request.params.workflow_run_id));
    },
  );
  app.post(
    '/v1/workflow-runs/:workflow_run_id/cancel',
    {
      config: { role: 'operator' },
      schema: {
        summary: 'Cancel a workflow run: no node starts again, its node runs not ended are cancelled',
        description:
          'Nothing is compensated: what a node run did stands, as its ledger records say. An ended ' +
          'workflow run answers 409 WORKFLOW_ALREADY_FINAL.',
        tags,
        security: BEARER,
        params,
        body: cancelWorkflowBody,
        response: { 200: workflowRunSchema, ...authErrors, 409: errorEnvelopeSchema },
      },
    },
    async (request) => {
      const { tenantId, actorId } = principal(request);
      const id = request.params.workflow_run_id;
      const view = await engine.cancel(tenantId, id, { reason: request.body.reason, actorId });
      request.log.info({ workflowRunId: id }, 'operator cancelled a workflow run');
      return toWorkflowRun(view);
    },
  );
  app.post(
    '/v1/workflow-runs/:workflow_run_id/decide',
    {
      config: { role: 'operator' },
      schema: {
        summary:
          'Decide for a workflow run waiting on a paused node: retry or skip the node, or fail the workflow',
        description:
          'Only for a workflow run in awaiting_operator, and the node it waits on; anything else answers ' +
          "409 WORKFLOW_NOT_PAUSED. retry starts the node's next attempt: a fresh run with new keys, told of " +
          "the calls of the failed run that stand (the node's standing_calls, recorded with the decision); " +
          'skip skips the node and the nodes needing it, and the workflow goes on.',
        tags,
        security: BEARER,
        params,
        body: decideWorkflowBody,
        response: { 200: workflowRunSchema, ...authErrors, 409: errorEnvelopeSchema },
      },
    },
    async (request) => {
      const { tenantId, actorId } = principal(request);
      const id = request.params.workflow_run_id;
      const { node, action, reason } = request.body;
      const view = await engine.decide(tenantId, id, { node, action, reason, actorId });
      request.log.info({ workflowRunId: id, node, action }, 'operator decided for a paused workflow run');
      return toWorkflowRun(view);
    },
  );
  app.get(
    '/v1/workflow-runs/:workflow_run_id/events',
    {
      config: { role: 'viewer' },
      schema: {
        summary: "A workflow run's events as server-sent events",
        description:
          'Every event from the start (or after Last-Event-ID / ?after=), then each new one as it is ' +
          'written (read every poll interval), `: keep-alive` comments in between. The stream ends once ' +
          'the workflow run has ended and its events are sent, or when the key is revoked.',
        tags,
        security: BEARER,
        params,
        querystring: workflowEventsQuery,
        response: {
          200: {
            description: 'text/event-stream: `id: <n>`, `event: <kind>`, `data: {...}`',
            content: { 'text/event-stream': { schema: z.string() } },
          },
          ...authErrors,
          429: errorEnvelopeSchema,
        },
      },
    },
    async (request, reply) => {
      const key = principal(request);
      const id = request.params.workflow_run_id;
      await engine.get(key.tenantId, id); // 404 before a stream opens
      const header = request.headers['last-event-id'];
      const lastId = Number(Array.isArray(header) ? header[0] : header);
      const after = request.query.after ?? (Number.isInteger(lastId) && lastId >= 0 ? lastId : 0);
      const stream = openStream(ctx, reply, key.keyId);
      return stream.send(
        eventLines(ctx, { ...key, workflowRunId: id }, after, stream.signal),
      ) as unknown as string;
    },
  );
}

async function* eventLines(
  ctx: ApiContext,
  key: { tenantId: string; keyId: string; workflowRunId: string },
  after: number,
  signal: AbortSignal,
): AsyncGenerator<string> {
  yield 'retry: 2000\n\n';
  let last = after;
  let lastWrite = Date.now();
  while (!signal.aborted) {
    const record = await ctx.store.workflows.get(key.tenantId, key.workflowRunId);
    const events = await ctx.store.workflows.events(key.tenantId, key.workflowRunId, last);
    for (const e of events) {
      yield `id: ${e.id}\nevent: ${e.kind}\ndata: ${JSON.stringify(toEvent(e))}\n\n`;
      last = e.id;
      lastWrite = Date.now();
    }
    // Read before the events: an ended workflow run's last events were in that read.
    if (record === undefined || isFinalWorkflowStatus(record.status)) return;
    if (Date.now() - lastWrite >= ctx.events.heartbeatMs) {
      yield ': keep-alive\n\n';
      lastWrite = Date.now();
    }
    await sleep(ctx.events.pollMs, undefined, { signal }).catch(() => undefined);
    if (signal.aborted) return;
    if (await keyRevoked(ctx.store, key)) {
      yield REVOKED_EVENT;
      return;
    }
  }
}
