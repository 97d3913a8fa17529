import { argsDigest } from '../ledger/index.js';

/**
 * The fingerprint of a request as a key store compares it: the SHA-256 of the canonical JSON of
 * what it is for (a tool's name, a method and route) and what it carries (arguments, a body).
 * The same key with another fingerprint is refused, never run.
 */
export function requestFingerprint(subject: string, payload: unknown): string {
  return argsDigest({ subject, payload: payload ?? null });
}
