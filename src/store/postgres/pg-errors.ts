import { OncelyError } from '../../errors/index.js';
import { DEADLOCK_DETECTED, LOCK_NOT_AVAILABLE, QUERY_CANCELED, SERIALIZATION_FAILURE } from './sqlstate.js';

/** Socket errors of a server that is down, unreachable or went away mid-statement. */
const SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
]);

/** What node-postgres says when the connection ended or could not be made in time. */
const CONNECTION_LOST =
  /connection terminated|timeout exceeded when trying to connect|not queryable|connection is closed/i;

/**
 * A failure that is the database server's state (down, restarting, out of connections or disk, too
 * slow, too contended), not the request's: the API answers these 503 with `Retry-After`.
 */
function outageOf(error: unknown): string | undefined {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string') {
    if (SOCKET_CODES.has(code)) return 'PostgreSQL cannot be reached';
    // 08: connection exception; 57P0x: the server is shutting down or starting; 53: out of
    // resources (disk, memory, connections); 58: an I/O error on the server.
    if (code.startsWith('08') || code.startsWith('57P')) return 'PostgreSQL is not accepting connections';
    if (code.startsWith('53')) return 'PostgreSQL is out of resources (disk, memory or connections)';
    if (code.startsWith('58')) return 'PostgreSQL reported an I/O error';
    if (code === QUERY_CANCELED)
      return 'PostgreSQL did not finish the statement within its statement timeout';
    if (code === LOCK_NOT_AVAILABLE || code === SERIALIZATION_FAILURE || code === DEADLOCK_DETECTED) {
      return 'PostgreSQL is too contended (a lock was not had in time)';
    }
  }
  if (typeof message === 'string' && CONNECTION_LOST.test(message))
    return 'the connection to PostgreSQL was lost';
  return undefined;
}

/** A driver error as `STORE_UNAVAILABLE` when it is an outage; anything else as it was. */
export function asStoreError(error: unknown): unknown {
  if (error instanceof OncelyError) return error;
  const outage = outageOf(error);
  if (outage === undefined) return error;
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  return new OncelyError(
    'STORE_UNAVAILABLE',
    `${outage} (${typeof message === 'string' ? message : String(error)}); try again`,
    { cause: error, details: typeof code === 'string' ? { postgres: code } : {} },
  );
}
