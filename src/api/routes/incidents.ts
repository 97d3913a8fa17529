import { z } from 'zod/v4';
import { listUnknownCalls, unknownCallCursor } from '../../calls/index.js';
import { reconcileHookOf } from '../../calls/index.js';
import type { ToolExecutionRecord } from '../../ledger/index.js';
import type { Tool } from '../../tools/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { toLedgerEvent, toToolExecution } from '../present.js';
import { authErrors, errorEnvelopeSchema, executionKeySchema } from '../schemas/common.js';
import {
  hookAskedSchema,
  incidentsQuery,
  incidentsSchema,
  resolveTogetherBody,
  resolvedTogetherSchema,
} from '../schemas/incidents.js';

/*
 * Incidents: the unknown calls an outage leaves behind, grouped by tool and downstream and searched
 * by key or argument value; settled together with one reason (each call its own compare-and-set);
 * and a call's reconcile hook asked now.
 */

const tags = ['tool executions'];
/** Unknown calls read for the incident view, longest waiting first. */
const READ_MAX = 1000;
const PAGE = 500;

export function incidentRoutes(app: ApiApp, ctx: ApiContext): void {
  listRoute(app, ctx);
  resolveTogetherRoute(app, ctx);
  askHookRoute(app, ctx);
}

function listRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/incidents',
    {
      config: { role: 'viewer' },
      schema: {
        summary: "The tenant's unknown calls grouped by tool and downstream, searchable",
        tags,
        security: BEARER,
        querystring: incidentsQuery,
        response: { 200: incidentsSchema, ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const { q, tool } = request.query;
      const unknown = await readUnknown(ctx, tenantId, tool);
      const terms = (q ?? '')
        .toLowerCase()
        .split(/\s+/)
        .filter((t) => t !== '');
      const tools = ctx.runtime.tools;
      const matched = unknown.calls.filter((r) =>
        terms.every((t) => haystack(r, tools).some((s) => s.includes(t))),
      );
      return {
        tenant_id: tenantId,
        q: q ?? null,
        unknown: unknown.calls.length,
        matched: matched.length,
        capped: unknown.capped,
        groups: groupsOf(matched, tools),
      };
    },
  );
}

async function readUnknown(
  ctx: ApiContext,
  tenantId: string,
  toolName: string | undefined,
): Promise<{ calls: ToolExecutionRecord[]; capped: boolean }> {
  const calls: ToolExecutionRecord[] = [];
  for (let after: ReturnType<typeof unknownCallCursor> | undefined; calls.length < READ_MAX;) {
    const page = await listUnknownCalls(ctx.runtime.ledger, tenantId, {
      limit: PAGE,
      ...(after === undefined ? {} : { after }),
      ...(toolName === undefined ? {} : { toolName }),
    });
    calls.push(...page);
    const last = page.at(-1);
    if (page.length < PAGE || last === undefined) return { calls, capped: false };
    after = unknownCallCursor(last);
  }
  return { calls: calls.slice(0, READ_MAX), capped: true };
}

/** What a search looks in: the call's names, and every value of its arguments, lower-cased. */
function haystack(r: ToolExecutionRecord, tools: ReadonlyMap<string, Tool>): string[] {
  const values: string[] = [r.idempotencyKey, r.runId, r.toolName, tools.get(r.toolName)?.downstream ?? ''];
  const walk = (v: unknown): void => {
    if (v === null || v === undefined) return;
    if (Array.isArray(v)) v.forEach(walk);
    else if (typeof v === 'object') Object.values(v).forEach(walk);
    else if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') values.push(String(v));
  };
  walk(r.args);
  return values.map((s) => s.toLowerCase());
}

function groupsOf(calls: ToolExecutionRecord[], tools: ReadonlyMap<string, Tool>) {
  const groups = new Map<string, ToolExecutionRecord[]>();
  for (const r of calls) {
    const id = `${r.toolName}\u0000${tools.get(r.toolName)?.downstream ?? ''}`;
    groups.set(id, [...(groups.get(id) ?? []), r]);
  }
  return [...groups.values()].map((members) => {
    const first = members[0] as ToolExecutionRecord;
    const tool = first.compensationOf === null ? tools.get(first.toolName) : undefined;
    return {
      tool_name: first.toolName,
      downstream: tools.get(first.toolName)?.downstream ?? null,
      effect: first.effect,
      can_ask_hook: tool !== undefined && reconcileHookOf(tool) !== undefined,
      count: members.length,
      oldest_attempt_started_at: first.attemptStartedAt,
      calls: members.map(toToolExecution),
    };
  });
}

function resolveTogetherRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/tool-executions/resolve',
    {
      config: { role: 'operator' },
      schema: {
        summary: 'Settle several unknown calls checked together, with one status and one reason',
        description:
          'Each call is its own compare-and-set, recorded in its own history with the batch id ' +
          '(detail.together). Calls that moved on meanwhile (settled by someone else, still in flight, not ' +
          'found) are listed in moved_on with why, and left as they stand.',
        tags,
        security: BEARER,
        body: resolveTogetherBody,
        response: { 200: resolvedTogetherSchema, ...authErrors },
      },
    },
    async (request) => {
      const { tenantId, actorId } = principal(request);
      const body = request.body;
      const done = await ctx.runtime.resolveTogether({
        tenantId,
        keys: body.keys,
        status: body.status,
        reason: body.reason,
        actorId,
        ...(body.result === undefined ? {} : { result: body.result }),
        ...(body.result_reference === undefined ? {} : { resultReference: body.result_reference }),
        ...(body.force === undefined ? {} : { force: body.force }),
      });
      request.log.info(
        { together: done.together, settled: done.settled.length, movedOn: done.movedOn.length },
        'operator resolved tool calls together',
      );
      return {
        tenant_id: tenantId,
        together: done.together,
        settled: done.settled.map(toToolExecution),
        moved_on: done.movedOn.map((m) => ({
          idempotency_key: m.idempotencyKey,
          code: m.code,
          message: m.message,
          record: m.record === null ? null : toToolExecution(m.record),
        })),
      };
    },
  );
}

function askHookRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/tool-executions/:key/reconcile',
    {
      config: { role: 'operator' },
      schema: {
        summary: "Ask an unknown call's reconcile hook now, and record what it says",
        description:
          'Runs the hook once, as the reconcile sweep would: completed settles the call, failed settles it ' +
          'once its attempt can no longer land, anything else is a note. 409 LEDGER_ALREADY_SETTLED for a ' +
          'settled call, LEDGER_NOT_RECONCILABLE when this server does not know its tool or the tool has no hook.',
        tags,
        security: BEARER,
        params: z.strictObject({ key: executionKeySchema }),
        response: { 200: hookAskedSchema, ...authErrors, 409: errorEnvelopeSchema },
      },
    },
    async (request) => {
      const { tenantId, actorId } = principal(request);
      const { key } = request.params;
      const asked = await ctx.runtime.askHook({ tenantId, idempotencyKey: key, actorId });
      request.log.info(
        { idempotencyKey: key, status: asked.record.status },
        'operator asked a reconcile hook',
      );
      return {
        record: toToolExecution(asked.record),
        said: asked.said === null ? null : toLedgerEvent(asked.said),
      };
    },
  );
}
