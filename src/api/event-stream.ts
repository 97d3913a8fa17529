import { Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { OncelyError } from '../errors/index.js';
import type { Store } from '../store/index.js';
import type { ApiContext } from './context.js';

/*
 * What every server-sent-event stream of the API shares: the limits on open streams, the end of a
 * stream when its client leaves or the server closes, the key looked up again while it is open, and
 * the answer's headers.
 */

/** The event a stream sends, and then ends, once its key is revoked. */
export const REVOKED_EVENT = `event: stream.closed\ndata: ${JSON.stringify({ reason: 'the API key was revoked' })}\n\n`;

/**
 * Counts a new stream against its key's limit and the server's, or refuses it with 429
 * `API_TOO_MANY_STREAMS`. Returns the release to call once, when the stream ends.
 */
function admitStream(ctx: ApiContext, keyId: string): () => void {
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
 * Opens a stream for the key (429 past the limits): the signal aborts when the client leaves or the
 * server closes. Call `send` with the stream's lines to answer.
 */
export function openStream(
  ctx: ApiContext,
  reply: FastifyReply,
  keyId: string,
): { signal: AbortSignal; send: (lines: AsyncIterable<string>) => FastifyReply } {
  const release = admitStream(ctx, keyId);
  const stop = new AbortController();
  ctx.streams.add(stop);
  reply.raw.on('close', () => {
    stop.abort();
    ctx.streams.delete(stop);
    release();
  });
  const send = (lines: AsyncIterable<string>): FastifyReply =>
    reply
      .header('content-type', 'text/event-stream; charset=utf-8')
      .header('cache-control', 'no-cache')
      .header('x-accel-buffering', 'no')
      // One stream per connection: when it ends, so does the connection, so a closing server
      // is not kept waiting for a keep-alive timeout.
      .header('connection', 'close')
      // A stream is piped as it is, never serialized; the schema types only the JSON answers.
      .send(Readable.from(lines));
  return { signal: stop.signal, send };
}

/** The key is looked up in the database: one revoked through any API process ends its streams on every process. */
export async function keyRevoked(store: Store, key: { tenantId: string; keyId: string }): Promise<boolean> {
  const live = await store.apiKeys.get(key.tenantId, key.keyId);
  return live === undefined || live.revokedAt !== null;
}
