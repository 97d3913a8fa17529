import { Readable } from 'node:stream';
import { z } from 'zod/v4';
import { listUnknownCalls } from '../../calls/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { authErrors, errorEnvelopeSchema } from '../schemas/common.js';
import { admitStream } from './run-events.js';

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
    const release = admitStream(ctx, key.keyId);
    const stop = new AbortController();
    ctx.streams.add(stop);
    reply.raw.on('close', () => {
      stop.abort();
      ctx.streams.delete(stop);
      release();
    });
    const lines = inboxLines(ctx, { tenantId: key.tenantId, keyId: key.keyId }, stop.signal);
    // The first counts before the stream starts: a database that cannot answer is an error, not a stream.
    await inboxCounts(ctx, key.tenantId);
    return reply
      .header('content-type', 'text/event-stream; charset=utf-8')
      .header('cache-control', 'no-cache')
      .header('x-accel-buffering', 'no')
      .header('connection', 'close')
      .send(Readable.from(lines) as unknown as string);
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
  signal: AbortSignal,
): AsyncGenerator<string> {
  yield `retry: 2000\n: inbox of ${key.tenantId}\n\n`;
  let last = '';
  let lastWrite = Date.now();
  while (!signal.aborted) {
    // As on a run's stream: a key revoked anywhere ends its streams everywhere.
    const live = await ctx.store.apiKeys.get(key.tenantId, key.keyId);
    if (live === undefined || live.revokedAt !== null) {
      yield `event: stream.closed\ndata: ${JSON.stringify({ reason: 'the API key was revoked' })}\n\n`;
      return;
    }
    const counts = JSON.stringify(await inboxCounts(ctx, key.tenantId));
    if (counts !== last) {
      last = counts;
      yield `event: inbox\ndata: ${counts}\n\n`;
      lastWrite = Date.now();
    } else if (Date.now() - lastWrite >= ctx.events.heartbeatMs) {
      yield ': keep-alive\n\n';
      lastWrite = Date.now();
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, EVERY_MS);
      signal.addEventListener(
        'abort',
        () => {
          clearTimeout(timer);
          resolve();
        },
        { once: true },
      );
    });
  }
}
