import { Readable } from 'node:stream';
import { z } from 'zod/v4';
import { OncelyError } from '../../errors/index.js';
import { isFinalRunStatus } from '../../run-state/index.js';
import type { Store } from '../../store/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { toRunEvent } from '../present.js';
import type { RunEar } from '../run-event-bell.js';
import { authErrors, errorEnvelopeSchema, runIdSchema } from '../schemas/common.js';
import { runEventsQuery } from '../schemas/runs.js';

const BATCH = 100;
const params = z.strictObject({ run_id: runIdSchema });
const headers = z.looseObject({
  'last-event-id': z
    .string()
    .regex(/^\d{1,15}$/, 'Last-Event-ID is the id (number) of the last event received')
    .optional(),
});

const schema = {
  summary: "The run's events as server-sent events, until the run has ended",
  description:
    "Each event has its id (its number in the run: 1, 2, 3…, assigned under the run's lock, so a " +
    'stream never skips one that commits late), its type as the event name, and the event as JSON ' +
    'data. Resume with the Last-Event-ID header (or ?after=ID); the stream ends once the run is final ' +
    'and every event has been sent.',
  tags: ['runs'],
  security: BEARER,
  params,
  querystring: runEventsQuery,
  headers,
  response: {
    200: {
      description: 'text/event-stream: `id: <id>`, `event: <type>`, `data: <RunEvent JSON>`',
      content: { 'text/event-stream': { schema: z.string() } },
    },
    ...authErrors,
    429: errorEnvelopeSchema,
  },
};

export function runEventRoutes(app: ApiApp, ctx: ApiContext): void {
  app.get('/v1/runs/:run_id/events', { config: { role: 'viewer' }, schema }, async (request, reply) => {
    const key = principal(request);
    const { tenantId } = key;
    const { run_id: runId } = request.params;
    await ctx.runtime.getRunSummary(tenantId, runId); // 404 before the stream starts
    const header = request.headers['last-event-id'];
    const after = request.query.after ?? (header === undefined ? 0 : Number(header));
    const release = admitStream(ctx, key.keyId);
    const stop = new AbortController();
    ctx.streams.add(stop);
    reply.raw.on('close', () => {
      stop.abort();
      ctx.streams.delete(stop);
      release();
    });
    const live = { tenantId, keyId: key.keyId };
    const ear = ctx.bell.open(tenantId, runId);
    reply.raw.on('close', () => ear.close());
    const lines = eventLines(ctx.store, { tenantId, runId, after }, ctx.events, stop.signal, live, ear);
    return (
      reply
        .header('content-type', 'text/event-stream; charset=utf-8')
        .header('cache-control', 'no-cache')
        .header('x-accel-buffering', 'no')
        // One stream per connection: when it ends, so does the connection, so a closing server
        // is not kept waiting for a keep-alive timeout.
        .header('connection', 'close')
        // A stream is piped as it is, never serialized; the schema types only the JSON answers.
        .send(Readable.from(lines) as unknown as string)
    );
  });
}

/**
 * Counts a new stream against its key's limit and the server's, or refuses it with 429
 * `API_TOO_MANY_STREAMS`. Returns the release to call once, when the stream ends.
 */
export function admitStream(ctx: ApiContext, keyId: string): () => void {
  const { perKey, total } = ctx.streamLimits;
  const held = ctx.streamsByKey.get(keyId) ?? 0;
  if (held >= perKey || ctx.streams.size >= total) {
    const which =
      held >= perKey ? `this key holds ${held}, its most` : `this server holds ${ctx.streams.size}, its most`;
    throw new OncelyError(
      'API_TOO_MANY_STREAMS',
      `too many open event streams (${which}); close one, or follow fewer runs at once`,
    );
  }
  ctx.streamsByKey.set(keyId, held + 1);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    const left = (ctx.streamsByKey.get(keyId) ?? 1) - 1;
    if (left <= 0) ctx.streamsByKey.delete(keyId);
    else ctx.streamsByKey.set(keyId, left);
  };
}

/**
 * The stream's text: every event after `after`, in id order, then new ones as they are written,
 * until the run is final and nothing is left to send (or the client goes away).
 */
async function* eventLines(
  store: Store,
  at: { tenantId: string; runId: string; after: number },
  timing: { pollMs: number; heartbeatMs: number },
  signal: AbortSignal,
  key: { tenantId: string; keyId: string },
  ear: RunEar,
): AsyncGenerator<string> {
  let last = at.after;
  let lastWrite = Date.now();
  let keyCheckedAt = Date.now();
  yield `retry: 2000\n: events of ${at.runId}\n\n`;
  while (!signal.aborted) {
    // The key is looked up again at least every second, in the database: a key revoked through any
    // API process ends its streams on every process.
    if (Date.now() - keyCheckedAt >= Math.min(1_000, timing.pollMs)) {
      keyCheckedAt = Date.now();
      const live = await store.apiKeys.get(key.tenantId, key.keyId);
      if (live === undefined || live.revokedAt !== null) {
        yield `event: stream.closed\ndata: ${JSON.stringify({ reason: 'the API key was revoked' })}\n\n`;
        return;
      }
    }
    // Status first: a final status's own event is written with it, so it is in the read that follows.
    const run = await store.runs.summary(at.tenantId, at.runId);
    const events = await store.runs.events(at.tenantId, at.runId, last, BATCH);
    for (const event of events) {
      last = event.seq;
      yield `id: ${event.seq}\nevent: ${event.type}\ndata: ${JSON.stringify(toRunEvent(event))}\n\n`;
      lastWrite = Date.now();
    }
    if (events.length === BATCH) continue;
    if (run === undefined || isFinalRunStatus(run.status)) return;
    if (Date.now() - lastWrite >= timing.heartbeatMs) {
      yield ': keep-alive\n\n';
      lastWrite = Date.now();
    }
    // Until the next poll, or sooner when a process writes this run's events (LISTEN/NOTIFY, Redis).
    await ear.wait(timing.pollMs, signal);
  }
}
