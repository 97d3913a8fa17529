import type { EffectKind, LedgerStatus } from './statuses.js';
import type { TransitionVia } from './transitions.js';

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** Who made a change: the runtime (a process id), a reconcile hook, or an operator (their actor id). */
export interface Actor {
  readonly kind: 'runtime' | 'reconcile' | 'operator';
  readonly id: string;
}

export interface ErrorInfo {
  readonly code: string;
  readonly message: string;
}

/** One record per `(tenantId, idempotencyKey)`. */
export interface ToolExecutionRecord {
  readonly tenantId: string;
  readonly idempotencyKey: string;
  readonly runId: string;
  readonly toolCallId: string;
  readonly toolName: string;
  readonly effect: EffectKind;
  readonly args: JsonValue;
  readonly argsDigest: string;
  readonly status: LedgerStatus;
  /** How many times the call has been reserved: 1, then +1 for each re-reservation after `failed`. */
  readonly attempt: number;
  /** Bumped by every transition; every write compares it. */
  readonly version: number;
  readonly result: JsonValue | null;
  readonly resultReference: string | null;
  readonly error: ErrorInfo | null;
  /** For a compensation record (`<key>:compensation`): the key of the call it undoes. */
  readonly compensationOf: string | null;
  readonly createdAt: string;
  readonly updatedAt: string;
  /** When the current attempt was reserved: an unknown call has been waiting since then. */
  readonly attemptStartedAt: string;
  /**
   * How long the current attempt may run, all its tries included (null on records made before this
   * was kept). Until `attemptStartedAt + attemptTimeoutMs` (plus a margin) the attempt may still
   * land, so a `failed` answer does not re-open the key and an operator's resolve is refused.
   */
  readonly attemptTimeoutMs: number | null;
  /** Set when a real outcome contradicted the settled record (see `conflict` events). */
  readonly conflictAt: string | null;
  /**
   * The digest of the tool and the identity of its arguments (see `repeatDigest`): two calls with
   * one digest are the same effect. Null for a read, a compensation, and records made before it was kept.
   */
  readonly repeatDigest: string | null;
  /** The conversation a guarded call was made in, when its caller named one. */
  readonly conversationId: string | null;
  readonly settledAt: string | null;
  readonly settledBy: Actor | null;
}

export const EVENT_KINDS = ['transition', 'ignored', 'note', 'conflict'] as const;
export type LedgerEventKind = (typeof EVENT_KINDS)[number];

/**
 * The history of a record, append only. `transition` moved the record; `ignored` is an outcome or
 * decision that arrived after the record was settled (or raced and lost) and changed nothing;
 * `note` records an observation that changes nothing (a reconcile hook that could not tell);
 * `conflict` is a real outcome that contradicts the record as settled (an effect landed on a call
 * settled `failed`, or on a key re-opened meanwhile): it changes nothing either, but is loud.
 */
export interface LedgerEvent {
  readonly id: number;
  readonly tenantId: string;
  readonly idempotencyKey: string;
  readonly at: string;
  readonly kind: LedgerEventKind;
  readonly actor: Actor;
  readonly via: TransitionVia | null;
  readonly from: LedgerStatus | null;
  readonly to: LedgerStatus | null;
  readonly attempt: number;
  readonly reason: string | null;
  readonly detail: JsonValue | null;
}
