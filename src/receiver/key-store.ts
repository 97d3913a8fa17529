import { OncelyError } from '../errors/index.js';
import type { JsonValue } from '../ledger/index.js';

/*
 * The receiving side's key store: what a service that honours an idempotency key (an MCP server
 * guarded by `onceOnly`, an HTTP endpoint) remembers of each key. One row per (scope, key):
 *
 *   (none) ──begin──▶ started ──complete──▶ completed   (a repeat gets the stored response)
 *                        │ ────fail──────▶ failed      (nothing applied: the next begin runs again)
 *                        └────abandon───▶ unknown     (the handler threw mid-way: never run again by itself)
 *
 * A process that dies mid-handler leaves `started`: like `unknown`, a repeat is refused, never run.
 * `settle` (an operator) moves `started` or `unknown` to `completed` or `failed`. Every write is one
 * statement, compare-and-set on the status (and on the claim's token for the runner's own writes):
 * of any number of begins of one key at once, exactly one runs.
 */

export const KEY_STATUSES = ['started', 'completed', 'failed', 'unknown'] as const;
export type KeyStatus = (typeof KEY_STATUSES)[number];

/** How long a completed or failed key is kept by default: 7 days. `started` and `unknown` are kept until settled. */
export const DEFAULT_KEEP_FOR_MS = 7 * 24 * 60 * 60 * 1000;
/** The longest key taken (as Stripe's). */
export const MAX_KEY_LENGTH = 255;

export interface KeyRecord {
  readonly scope: string;
  readonly key: string;
  readonly status: KeyStatus;
  /** The digest of what the key was sent with (the tool or route and its arguments or body). */
  readonly fingerprint: string;
  /** What the key was used for, in words (`issue_credit`, `POST /refunds`), for messages. */
  readonly subject: string | null;
  /** How many times the key began: 1, then +1 each time it ran again after `failed` or its expiry. */
  readonly attempt: number;
  /** The stored response of a completed key. */
  readonly response: JsonValue | null;
  /** What a handler that threw said, or why the key was settled by hand. */
  readonly error: string | null;
  readonly startedAt: string;
  readonly settledAt: string | null;
}

/** The right to finish one begun key: only its holder's `complete`, `fail` or `abandon` is taken. */
export interface KeyClaim {
  readonly scope: string;
  readonly key: string;
  readonly token: string;
  readonly attempt: number;
}

export interface BeginRequest {
  readonly key: string;
  readonly fingerprint: string;
  readonly subject?: string;
  /** Whose key it is (a client, a tenant); default `''`. The same key in two scopes is two keys. */
  readonly scope?: string;
}

/** What to do with a request that carries a key. */
export type BeginOutcome =
  | { readonly kind: 'run'; readonly claim: KeyClaim }
  | { readonly kind: 'replay'; readonly record: KeyRecord }
  | { readonly kind: 'mismatch'; readonly record: KeyRecord }
  | { readonly kind: 'in_progress'; readonly record: KeyRecord }
  | { readonly kind: 'unknown'; readonly record: KeyRecord };

export type Settlement =
  | { readonly status: 'completed'; readonly response: JsonValue; readonly reason: string }
  | { readonly status: 'failed'; readonly reason: string };

export interface KeyStore {
  readonly dialect: 'sqlite' | 'postgres';
  /** How long a completed or failed key is kept: after it, a begin of the key runs as a new one. */
  readonly keepForMs: number;
  /** Reserves the key (`run`), or says why not: the stored response, another fingerprint, running, unknown. */
  begin(request: BeginRequest): Promise<BeginOutcome>;
  /** Stores the response of a claim; false when the key was no longer this claim's (settled by hand). */
  complete(claim: KeyClaim, response: JsonValue): Promise<boolean>;
  /** The claim applied nothing: the key may run again. False when it was no longer this claim's. */
  fail(claim: KeyClaim, reason?: string): Promise<boolean>;
  /** The claim's handler failed mid-way: the outcome is unknown and the key never runs again by itself. */
  abandon(claim: KeyClaim, error: string): Promise<boolean>;
  /** What became of a key; undefined when it was never seen (or forgotten after `keepForMs`). */
  lookup(key: string, scope?: string): Promise<KeyRecord | undefined>;
  /** An operator's word on a `started` or `unknown` key; false when it was not (any longer) either. */
  settle(key: string, settlement: Settlement, scope?: string): Promise<boolean>;
  /** Deletes completed and failed keys older than `keepForMs`; how many. */
  purgeExpired(): Promise<number>;
  close(): Promise<void>;
}

/** Refuses a key that is not 1-255 characters (`LEDGER_KEY_INVALID`). */
export function assertReceiverKey(key: unknown): asserts key is string {
  if (typeof key === 'string' && key.length > 0 && key.length <= MAX_KEY_LENGTH) return;
  throw new OncelyError(
    'LEDGER_KEY_INVALID',
    `an idempotency key must be a string of 1-${MAX_KEY_LENGTH} characters; got ${describe(key)}`,
  );
}

/** Refuses a keep window that is not a whole number of milliseconds, at least one. */
export function assertKeepFor(ms: number): void {
  if (Number.isInteger(ms) && ms >= 1) return;
  throw new OncelyError(
    'CONFIG_INVALID',
    `keepForMs must be a whole number of milliseconds (at least 1); got ${String(ms)}`,
  );
}

/**
 * What a begin that did not win the key's row tells its caller, from the row as read after (and
 * whether the store's clock has it past its keep window): `retry` when the row is gone or may be
 * taken over again (it settled `failed`, or expired, in between).
 */
export function outcomeOfExisting(
  found: { readonly record: KeyRecord; readonly expired: boolean } | undefined,
  fingerprint: string,
): BeginOutcome | 'retry' {
  if (found === undefined || found.expired || found.record.status === 'failed') return 'retry';
  const { record } = found;
  if (record.fingerprint !== fingerprint) return { kind: 'mismatch', record };
  if (record.status === 'completed') return { kind: 'replay', record };
  if (record.status === 'started') return { kind: 'in_progress', record };
  return { kind: 'unknown', record };
}

export function beginRaceError(key: string): OncelyError {
  return new OncelyError(
    'STORE_UNAVAILABLE',
    `the idempotency key ${JSON.stringify(key)} kept changing under its begin (settled and taken over again); try again`,
  );
}

function describe(value: unknown): string {
  if (typeof value === 'string') return `${value.length} characters`;
  return value === undefined ? 'nothing' : `a ${typeof value}`;
}
