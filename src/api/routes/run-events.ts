import { z } from 'zod/v4';
import { isFinalRunStatus } from '../../run-state/index.js';
import type { Store } from '../../store/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { REVOKED_EVENT, keyRevoked, openStream } from '../event-stream.js';
import { toRunEvent } from '../present.js';
import type { RunEar } from '../run-event-bell.js';
import type { DeltaBatch } from '../../runs/stream-deltas.js';
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
    'and every event has been sent. An agent that streams also sends `model.delta` events without an ' +
    'id as its model answers (text, reasoning and tool-call deltas; a `start` marked `restarted` when ' +
    'a step is asked again after its driver died mid-answer); they are not durable: the ' +
    '`model.response` event that follows holds the whole response.',
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
  const live = new LiveResponses();
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
    // The deltas heard before this read go before what it reads: a process tells a delta before it
    // writes the response it belongs to, so a response this read finds has all its deltas here
    // (those heard later, of a response already sent whole, are dropped).
    const heard = ear.takeDeltas();
    // Status first: a final status's own event is written with it, so it is in the read that follows.
    const run = await store.runs.summary(at.tenantId, at.runId);
    const events = await store.runs.events(at.tenantId, at.runId, last, BATCH);
    for (const line of live.lines(heard)) {
      yield line;
      lastWrite = Date.now();
    }
    for (const event of events) {
      last = event.seq;
      if (event.type === 'model.response') live.answered(event.data);
      yield `id: ${event.seq}\nevent: ${event.type}\ndata: ${JSON.stringify(toRunEvent(event))}\n\n`;
      lastWrite = Date.now();
    }
    if (events.length === BATCH) continue;
    if (run === undefined || isFinalRunStatus(run.status)) return;
    if (Date.now() - lastWrite >= timing.heartbeatMs) {
      yield ': keep-alive\n\n';
      lastWrite = Date.now();
    }
    // Until the next poll, or sooner when a process writes this run's events (LISTEN/NOTIFY, Redis);
    // streamed deltas are sent as they come meanwhile, without reading the store again.
    const pollAt = Date.now() + timing.pollMs;
    while ((await ear.wait(Math.max(0, pollAt - Date.now()), signal)) === 'deltas' && !signal.aborted) {
      for (const line of live.lines(ear.takeDeltas())) yield line;
      lastWrite = Date.now();
      if (Date.now() >= pollAt) break;
    }
  }
}

/**
 * What a stream sends of the model's responses while they stream: `model.delta` events without an
 * id (they are not durable: a client resuming from Last-Event-ID gets the whole response in its
 * `model.response` event instead), each delta once and in order, none of a step whose response is
 * already durable. A stream that begins again for a step already begun (its driver died or lost
 * the model mid-answer, and the step is asked again) starts with `restarted: true`.
 */
export class LiveResponses {
  /** The last step whose response was sent whole. */
  #answered = 0;
  /** Per step, the stream whose deltas were sent (epoch:stream). */
  readonly #streamOf = new Map<number, string>();
  /** Per stream, the last delta sent. */
  readonly #seqOf = new Map<string, number>();

  /** A durable `model.response` was sent: its step streams no more. */
  answered(data: unknown): void {
    const step = (data as { step?: unknown } | null)?.step;
    if (typeof step === 'number' && step > this.#answered) this.#answered = step;
  }

  *lines(batches: readonly DeltaBatch[]): Generator<string> {
    for (const batch of batches) {
      if (batch.step <= this.#answered) continue;
      const name = `${batch.epoch}:${batch.stream}`;
      for (const delta of batch.deltas) {
        if (delta.seq <= (this.#seqOf.get(name) ?? 0)) continue;
        this.#seqOf.set(name, delta.seq);
        const was = this.#streamOf.get(batch.step);
        this.#streamOf.set(batch.step, name);
        const restarted = delta.type === 'start' ? { restarted: was !== undefined && was !== name } : {};
        const data = { step: batch.step, epoch: batch.epoch, stream: batch.stream, ...delta, ...restarted };
        yield `event: model.delta\ndata: ${JSON.stringify(data)}\n\n`;
      }
    }
  }
}
