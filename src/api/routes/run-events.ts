import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { isFinalRunStatus } from '../../run-state/index.js';
import type { Store } from '../../store/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { toRunEvent } from '../present.js';
import { authErrors, runIdSchema } from '../schemas/common.js';
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
  },
};

export function runEventRoutes(app: ApiApp, ctx: ApiContext): void {
  app.get('/v1/runs/:run_id/events', { config: { role: 'viewer' }, schema }, async (request, reply) => {
    const { tenantId } = principal(request);
    const { run_id: runId } = request.params;
    await ctx.runtime.getRun(tenantId, runId); // 404 before the stream starts
    const header = request.headers['last-event-id'];
    const after = request.query.after ?? (header === undefined ? 0 : Number(header));
    const stop = new AbortController();
    ctx.streams.add(stop);
    reply.raw.on('close', () => {
      stop.abort();
      ctx.streams.delete(stop);
    });
    const lines = eventLines(ctx.store, { tenantId, runId, after }, ctx.events, stop.signal);
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
 * The stream's text: every event after `after`, in id order, then new ones as they are written,
 * until the run is final and nothing is left to send (or the client goes away).
 */
async function* eventLines(
  store: Store,
  at: { tenantId: string; runId: string; after: number },
  timing: { pollMs: number; heartbeatMs: number },
  signal: AbortSignal,
): AsyncGenerator<string> {
  let last = at.after;
  let lastWrite = Date.now();
  yield `retry: 2000\n: events of ${at.runId}\n\n`;
  while (!signal.aborted) {
    // Status first: a final status's own event is written with it, so it is in the read that follows.
    const run = await store.runs.get(at.tenantId, at.runId);
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
    await sleep(timing.pollMs, undefined, { signal }).catch(() => undefined);
  }
}
