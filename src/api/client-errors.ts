import { STATUS_CODES, maxHeaderSize } from 'node:http';
import type { Server, Socket } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';
import { OncelyError } from '../errors/index.js';
import type { ErrorCode } from '../errors/index.js';
import { RETRY_AFTER_S, errorResponse } from './http-errors.js';

/** The headers every answer carries (see the `onSend` hook in server.ts), raw answers included. */
export const ANSWER_HEADERS = {
  'x-content-type-options': 'nosniff',
  'cache-control': 'no-store',
  // An answer is JSON: it loads nothing, runs nothing and is framed by nobody.
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-resource-policy': 'same-origin',
} as const;

/**
 * The error of a request Node's HTTP parser refused before fastify saw it (`clientError`): header
 * fields too large, a timeout, or bytes that are not HTTP.
 */
export function clientErrorOf(error: NodeJS.ErrnoException): OncelyError {
  switch (error.code) {
    case 'HPE_HEADER_OVERFLOW':
      return new OncelyError(
        'API_HEADERS_TOO_LARGE',
        `the request's header fields are too large (at most ${maxHeaderSize} bytes together); send fewer or shorter headers`,
      );
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return new OncelyError('API_REQUEST_TOO_LARGE', "the request body's chunk extensions are too large");
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new OncelyError(
        'API_REQUEST_TIMEOUT',
        'the request did not arrive in time; send it again in one go',
      );
    default:
      return new OncelyError(
        'API_REQUEST_INVALID',
        `the request is not valid HTTP/1.1${error.code?.startsWith('HPE_') === true ? ` (${error.code})` : ''}; check the client`,
      );
  }
}

/**
 * The bytes of a whole HTTP/1.1 answer to a refused request: the envelope, the usual headers, and
 * `Connection: close` (the parser cannot go on with the connection).
 */
export function rawErrorAnswer(error: NodeJS.ErrnoException | OncelyError): { code: string; bytes: string } {
  const { status, body } = errorResponse(error instanceof OncelyError ? error : clientErrorOf(error));
  const json = JSON.stringify(body);
  const retryAfter = RETRY_AFTER_S[body.error.code as ErrorCode];
  const headers = {
    'content-type': 'application/json; charset=utf-8',
    ...(retryAfter === undefined ? {} : { 'retry-after': String(retryAfter) }),
    'content-length': String(Buffer.byteLength(json, 'utf8')),
    ...ANSWER_HEADERS,
    connection: 'close',
  };
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
  return {
    code: body.error.code,
    bytes: `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n${head.join('')}\r\n${json}`,
  };
}

/**
 * Fastify's `clientErrorHandler`: answers what Node's parser refused in the API's envelope instead of
 * fastify's or Node's own body. The error is logged by its code only: it carries the raw bytes of the
 * request, which may hold a key.
 */
export function answerClientError(
  log: FastifyBaseLogger | undefined,
  error: NodeJS.ErrnoException,
  socket: Socket,
): void {
  // A reset connection has no one to answer (see Node's 'clientError' event).
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const answer = rawErrorAnswer(error);
  log?.info({ code: answer.code, parserError: error.code }, 'request refused by the HTTP parser');
  if (socket.writable) socket.end(answer.bytes);
  socket.destroySoon();
}

/**
 * Holds the server to `max` open connections: one past it is answered 429 `API_TOO_MANY_CONNECTIONS`
 * in the envelope and closed, before its request is read (Node's own `maxConnections` would drop it
 * without a word).
 */
export function limitConnections(server: Server, max: number, log: FastifyBaseLogger | undefined): void {
  let open = 0;
  server.on('connection', (socket: Socket) => {
    if (open >= max) {
      const answer = rawErrorAnswer(
        new OncelyError(
          'API_TOO_MANY_CONNECTIONS',
          `this server holds ${max} connections already; close idle ones, or try again shortly`,
        ),
      );
      log?.warn({ code: answer.code, max }, 'connection refused: too many open connections');
      socket.end(answer.bytes);
      socket.destroySoon();
      return;
    }
    open += 1;
    socket.once('close', () => {
      open -= 1;
    });
  });
}
