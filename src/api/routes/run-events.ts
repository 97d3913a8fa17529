import { z } from 'zod/v4';
import { isFinalRunStatus } from '../../run-state/index.js';
import type { Store } from '../../store/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { REVOKED_EVENT, keyRevoked, openStream } from '../event-stream.js';
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
    const stream = openStream(ctx, reply, key.keyId);
    const live = { tenantId, keyId: key.keyId };
    const ear = ctx.bell.open(tenantId, runId);
    reply.raw.on('close', () => ear.close());
    const lines = eventLines(ctx.store, { tenantId, runId, after }, ctx.events, stream.signal, live, ear);
    return stream.send(lines) as unknown as string;
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
      if (await keyRevoked(store, key)) {
        yield REVOKED_EVENT;
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
