import { z } from 'zod/v4';
import type { ToolExecutionRecord } from '../../ledger/index.js';
import type { ApprovalRecord, ApprovalStatus } from '../../run-state/index.js';
import type { Store } from '../../store/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { cursorTime, decodeCursor, pageOf } from '../cursor.js';
import { toApproval } from '../present.js';
import { approvalKeySchema, authErrors, errorEnvelopeSchema, page } from '../schemas/common.js';
import { approvalSchema, approveBody, listApprovalsQuery, rejectBody } from '../schemas/approvals.js';

const tags = ['approvals'];
const params = z.strictObject({ key: approvalKeySchema });
const DECIDED: ApprovalStatus[] = ['approved', 'rejected', 'consumed'];
/** `pending` pages come first; `decided` after them; `one` when the client filters by a status. */
const approvalCursor = z.strictObject({
  phase: z.enum(['pending', 'decided', 'one']),
  at: cursorTime,
  key: approvalKeySchema,
});
type ApprovalCursor = z.output<typeof approvalCursor>;

export function approvalRoutes(app: ApiApp, ctx: ApiContext): void {
  listRoute(app, ctx);
  for (const decision of ['approve', 'reject'] as const) decisionRoute(app, ctx, decision);
}

function listRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/approvals',
    {
      config: { role: 'viewer' },
      schema: {
        summary: "The tenant's approvals, pending first, then oldest first",
        tags,
        security: BEARER,
        querystring: listApprovalsQuery,
        response: { 200: page(approvalSchema), ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const q = request.query;
      const after = decodeCursor(approvalCursor, q.cursor);
      const approvals =
        q.status === undefined
          ? await pendingFirst(ctx.store, tenantId, q.limit, after)
          : await ctx.store.runs.listApprovals(tenantId, {
              statuses: [q.status],
              limit: q.limit,
              ...(after === undefined ? {} : { after: { at: after.at, key: after.key } }),
            });
      const phase = (a: ApprovalRecord): ApprovalCursor['phase'] =>
        q.status !== undefined ? 'one' : a.status === 'pending' ? 'pending' : 'decided';
      const earlier = await earlierCalls(ctx.store, tenantId, approvals);
      const present = (a: ApprovalRecord) => toApproval(a, earlierOf(earlier, a));
      return pageOf(approvals, q.limit, present, (a) => ({
        phase: phase(a),
        at: a.createdAt,
        key: a.idempotencyKey,
      }));
    },
  );
}

/** The earlier calls the repeats among `approvals` repeat, by key: one read for a page. */
async function earlierCalls(
  store: Store,
  tenantId: string,
  approvals: readonly ApprovalRecord[],
): Promise<Map<string, ToolExecutionRecord>> {
  const keys = new Set(approvals.flatMap((a) => (a.repeatOf === null ? [] : [a.repeatOf])));
  if (keys.size === 0) return new Map();
  const records = await store.ledger.getMany(
    [...keys].map((idempotencyKey) => ({ tenantId, idempotencyKey })),
  );
  return new Map(records.map((r) => [r.idempotencyKey, r]));
}

function earlierOf(
  earlier: ReadonlyMap<string, ToolExecutionRecord>,
  a: ApprovalRecord,
): ToolExecutionRecord | undefined {
  return a.repeatOf === null ? undefined : earlier.get(a.repeatOf);
}

/** Pending approvals in (createdAt, key) order, then the decided ones in the same order. */
async function pendingFirst(
  store: Store,
  tenantId: string,
  limit: number,
  after: ApprovalCursor | undefined,
): Promise<ApprovalRecord[]> {
  const position = after === undefined ? {} : { after: { at: after.at, key: after.key } };
  const pending =
    after?.phase === 'decided'
      ? []
      : await store.runs.listApprovals(tenantId, { statuses: ['pending'], limit, ...position });
  if (pending.length >= limit) return pending;
  const decided = await store.runs.listApprovals(tenantId, {
    statuses: DECIDED,
    limit: limit - pending.length,
    ...(after?.phase === 'decided' ? position : {}),
  });
  return [...pending, ...decided];
}

function decisionRoute(app: ApiApp, ctx: ApiContext, decision: 'approve' | 'reject'): void {
  app.post(
    `/v1/approvals/:key/${decision}`,
    {
      config: { role: 'operator' },
      schema: {
        summary:
          decision === 'approve'
            ? 'Approve the call waiting for approval (these exact arguments, once)'
            : 'Reject the call waiting for approval; the reason is required, and the model hears it',
        description:
          'Of operators deciding at once exactly one wins; the others get 409 APPROVAL_ALREADY_DECIDED.',
        tags,
        security: BEARER,
        params,
        body: decision === 'approve' ? approveBody : rejectBody,
        response: { 200: approvalSchema, ...authErrors, 409: errorEnvelopeSchema },
      },
    },
    async (request) => {
      const { tenantId, actorId } = principal(request);
      const { key } = request.params;
      const reason = request.body.reason;
      const input = { tenantId, idempotencyKey: key, actorId, ...(reason === undefined ? {} : { reason }) };
      const approval =
        decision === 'approve'
          ? await ctx.runtime.approve(input)
          : await ctx.runtime.reject({ ...input, reason: reason ?? '' });
      request.log.info(
        { idempotencyKey: key, runId: approval.runId, decision: approval.status },
        'operator decided an approval',
      );
      const earlier = await earlierCalls(ctx.store, tenantId, [approval]);
      return toApproval(approval, earlierOf(earlier, approval));
    },
  );
}
