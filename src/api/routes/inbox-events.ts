import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod/v4';
import { listUnknownCalls } from '../../calls/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { REVOKED_EVENT, keyRevoked, openStream } from '../event-stream.js';
import { authErrors, errorEnvelopeSchema } from '../schemas/common.js';

/** Counted up to this many per list; past it the count says `capped`. */
const CAP = 500;
/** How often the counts are read while a stream is open. */
const EVERY_MS = 1_000;

export interface InboxCounts {
  readonly unknown: number;
  readonly conflicts: number;
  readonly pending_approvals: number;
  /** A list held more than 500: its count is 500. */
  readonly capped: boolean;
}

const schema = {
  summary: "The tenant's inbox counts as server-sent events: unknown calls, conflicts, pending approvals",
  description:
    'An `inbox` event with the counts at once, then another each time they change (read every ' +
    'second); `: keep-alive` comments in between. The stream lasts until the client leaves or the ' +
    'key is revoked (`event: stream.closed`). What the console shows live.',
  tags: ['tool executions'],
  security: BEARER,
  response: {
    200: {
      description:
        'text/event-stream: `event: inbox`, `data: {"unknown":n,"conflicts":n,"pending_approvals":n,"capped":false}`',
      content: { 'text/event-stream': { schema: z.string() } },
    },
    ...authErrors,
    429: errorEnvelopeSchema,
  },
};

export function inboxEventRoutes(app: ApiApp, ctx: ApiContext): void {
  app.get('/v1/inbox/events', { config: { role: 'viewer' }, schema }, async (request, reply) => {
    const key = principal(request);
    const stream = openStream(ctx, reply, key.keyId);
    // The first counts before the stream starts: a database that cannot answer is an error, not a stream.
    const first = await inboxCounts(ctx, key.tenantId);
    const lines = inboxLines(ctx, { tenantId: key.tenantId, keyId: key.keyId }, first, stream.signal);
    return stream.send(lines) as unknown as string;
  });
}

/** The tenant's counts, as the inbox lists define them. */
export async function inboxCounts(ctx: ApiContext, tenantId: string): Promise<InboxCounts> {
  const [unknown, conflicts, approvals] = await Promise.all([
    listUnknownCalls(ctx.runtime.ledger, tenantId, { limit: CAP + 1 }),
    ctx.store.ledger.list(tenantId, { conflict: true, limit: CAP + 1 }),
    ctx.store.runs.listApprovals(tenantId, { statuses: ['pending'], limit: CAP + 1 }),
  ]);
  const counted = [unknown.length, conflicts.length, approvals.length];
  const [u, c, a] = counted.map((n) => Math.min(n, CAP)) as [number, number, number];
  return { unknown: u, conflicts: c, pending_approvals: a, capped: counted.some((n) => n > CAP) };
}

async function* inboxLines(
  ctx: ApiContext,
  key: { tenantId: string; keyId: string },
  first: InboxCounts,
  signal: AbortSignal,
): AsyncGenerator<string> {
  yield `retry: 2000\n: inbox of ${key.tenantId}\n\n`;
  let last = '';
  let lastWrite = Date.now();
  for (let counts = first; !signal.aborted; counts = await inboxCounts(ctx, key.tenantId)) {
    const data = JSON.stringify(counts);
    if (data !== last) {
      last = data;
      yield `event: inbox\ndata: ${data}\n\n`;
      lastWrite = Date.now();
    } else if (Date.now() - lastWrite >= ctx.events.heartbeatMs) {
      yield ': keep-alive\n\n';
      lastWrite = Date.now();
    }
    await sleep(EVERY_MS, undefined, { signal }).catch(() => undefined);
    // As on a run's stream: a key revoked anywhere ends its streams everywhere.
    if (signal.aborted) return;
    if (await keyRevoked(ctx.store, key)) {
      yield REVOKED_EVENT;
      return;
    }
  }
}
