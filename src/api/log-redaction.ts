import type { FastifyRequest } from 'fastify';
import { containsApiKey } from './auth/api-keys.js';

const REDACTED = '***';

/** Parameter names whose values are secrets, whatever they hold (`api_key`, `token`, `password`…). */
const SECRET_NAME = /key|token|secret|passw|pwd|auth|bearer|credential|session|signature/;

/**
 * The URL as a log may show it: the value of every secret-named query parameter, and every path
 * segment or parameter that holds a key (percent-encoded or not), become `***`. A key belongs in the
 * `Authorization` header, but a careless script or a hostile client may put one in a URL.
 *
 * @example
 * redactUrl('/v1/runs?api_key=oncely_0123456789ab_…&limit=5'); // '/v1/runs?api_key=***&limit=5'
 */
export function redactUrl(url: string): string {
  const mark = url.indexOf('?');
  const path = mark === -1 ? url : url.slice(0, mark);
  const safePath = path
    .split('/')
    .map((segment) => (holdsKey(segment) ? REDACTED : segment))
    .join('/');
  if (mark === -1) return safePath;
  const safeQuery = url
    .slice(mark + 1)
    .split('&')
    .map(redactParameter)
    .join('&');
  return `${safePath}?${safeQuery}`;
}

function redactParameter(pair: string): string {
  const eq = pair.indexOf('=');
  if (eq === -1) return holdsKey(pair) ? REDACTED : pair;
  const name = pair.slice(0, eq);
  if (holdsKey(name)) return `${REDACTED}=${REDACTED}`;
  const secretName = SECRET_NAME.test(
    decoded(name)
      .toLowerCase()
      .replace(/[^a-z]/g, ''),
  );
  return secretName || holdsKey(pair.slice(eq + 1)) ? `${name}=${REDACTED}` : pair;
}

function holdsKey(text: string): boolean {
  return containsApiKey(text) || containsApiKey(decoded(text));
}

function decoded(text: string): string {
  try {
    return decodeURIComponent(text.replaceAll('+', ' '));
  } catch {
    return text;
  }
}

/**
 * The `req` serializer of the request log: fastify's own fields, with the URL redacted.
 */
export function requestLogFields(request: FastifyRequest) {
  return {
    method: request.method,
    url: redactUrl(request.url),
    version: request.headers['accept-version'],
    host: request.host,
    remoteAddress: request.ip,
    remotePort: request.socket.remotePort,
  };
}
