import type {
  Actor,
  EffectKind,
  ErrorInfo,
  JsonValue,
  LedgerEvent,
  LedgerStatus,
  RepeatScope,
  ToolExecutionRecord,
  TransitionVia,
} from '../ledger/index.js';

/** One call to reserve. All requests of one `reserve` belong to one tenant and have distinct keys. */
export interface ReserveRequest {
  readonly tenantId: string;
  readonly idempotencyKey: string;
  readonly runId: string;
  readonly toolCallId: string;
  readonly toolName: string;
  readonly effect: EffectKind;
  readonly args: JsonValue;
  readonly argsDigest: string;
  readonly compensationOf: string | null;
  /** How long the attempt may run, all its tries included; kept on the record (see `attemptMayLand`). */
  readonly attemptTimeoutMs: number;
  /** The digest of the tool and its arguments' identity (`repeatDigest`); null for a read or a compensation. */
  readonly repeatDigest?: string | null;
  /** The conversation a guarded call was made in, when its caller names one (a repeat's scope). */
  readonly conversationId?: string | null;
  /**
   * Re-open this `failed` record (the decision table said `reopen`), compare-and-set on the version
   * the caller saw. Without it an existing record is never taken over: it comes back `existing`.
   */
  readonly reopenVersion?: number;
}

/**
 * `reserved`: this caller now holds the call (a new record, or a re-opening of a `failed` one at the
 * version it saw) and may run the tool. `existing`: a record stands; the caller reads its status and
 * digest, asks the decision table, and must not run the tool.
 */
export type ReserveResult =
  | { readonly kind: 'reserved'; readonly record: ToolExecutionRecord }
  | { readonly kind: 'existing'; readonly record: ToolExecutionRecord };

/** A compare-and-set move of one record along an edge of the transition table. */
export interface TransitionRequest {
  readonly tenantId: string;
  readonly idempotencyKey: string;
  readonly via: Exclude<TransitionVia, 'reserve'>;
  readonly to: LedgerStatus;
  /** The status and version the caller saw; the move happens only if both still hold. */
  readonly expect: { readonly status: LedgerStatus; readonly version: number };
  readonly actor: Actor;
  readonly reason: string | null;
  /** Set on `completed`; left untouched otherwise. */
  readonly result?: JsonValue | null;
  readonly resultReference?: string | null;
  /** Set on `failed` (what went wrong); cleared by nothing but a re-reservation. */
  readonly error?: ErrorInfo | null;
  readonly detail?: JsonValue | null;
  /**
   * When the compare-and-set loses, append the attempt to the history: as `conflict` when it
   * contradicts the record as it stands (`contradicts`), which also marks the record, else `ignored`.
   */
  readonly recordIgnored: boolean;
  /** The attempt this outcome or answer is about (default the expected record's); the history names it. */
  readonly attempt?: number;
  /**
   * The tool's downstream honours the idempotency key (`downstreamAcceptsKey`), so an earlier
   * attempt's effect and a later one's are one effect; default false (two effects: a conflict).
   */
  readonly keyed?: boolean;
}

export type TransitionResult =
  | { readonly applied: true; readonly record: ToolExecutionRecord }
  | {
      readonly applied: false;
      readonly record: ToolExecutionRecord | undefined;
      /** The lost outcome contradicted the record and was recorded as a `conflict`. */
      readonly conflict?: boolean;
    };

export interface NoteRequest {
  readonly tenantId: string;
  readonly idempotencyKey: string;
  readonly actor: Actor;
  readonly reason: string;
  readonly detail?: JsonValue | null;
}

export interface ListCursor {
  readonly at: string;
  readonly key: string;
}

export interface ListFilter {
  readonly statuses?: readonly LedgerStatus[];
  readonly runId?: string;
  readonly toolName?: string;
  /** Only records a real outcome contradicted (`conflictAt` set). */
  readonly conflict?: boolean;
  readonly limit: number;
  /** Records strictly after this position in (attemptStartedAt, idempotencyKey) order. */
  readonly after?: ListCursor;
}

/** The scopes a reservation can check for repeats itself (a tenant-wide window is checked under a lock). */
export type InlineRepeatScope = Extract<RepeatScope, { kind: 'run' | 'conversation' }>;

/** A record's key, with its tenant. */
export interface LedgerKey {
  readonly tenantId: string;
  readonly idempotencyKey: string;
}

/** The ledger's storage operations. Every write is one atomic statement or one transaction. */
export interface LedgerStore {
  /** Reserves every request atomically: of any number of concurrent reservers, one wins each key. */
  reserve(requests: readonly ReserveRequest[], actor: Actor): Promise<ReserveResult[]>;
  /**
   * One new call's reservation with its repeat check in the same write: the call is reserved only if
   * no other call of its scope (its run, or its conversation) with its repeat digest took effect or
   * may have (as `repeatsOf` finds them). `repeated`: such a call exists and this key has no record;
   * nothing was written, and the caller decides as a repeat is decided. A record of this key that
   * stands comes back `existing` whatever the scope holds. The request must carry a repeat digest.
   */
  reserveUnlessRepeat(
    request: ReserveRequest,
    scope: InlineRepeatScope,
    actor: Actor,
  ): Promise<ReserveResult | { readonly kind: 'repeated' }>;
  transition(request: TransitionRequest): Promise<TransitionResult>;
  /**
   * Several transitions, each its own compare-and-set exactly as `transition` would make it, in one
   * atomic write (one statement on PostgreSQL when every one applies): the outcomes of a step. The
   * results are in the requests' order. Keys must differ.
   */
  transitions(requests: readonly TransitionRequest[]): Promise<TransitionResult[]>;
  note(request: NoteRequest): Promise<void>;
  get(tenantId: string, idempotencyKey: string): Promise<ToolExecutionRecord | undefined>;
  /** The records of these keys, of any tenants, that exist (in no particular order): one read. */
  getMany(keys: readonly LedgerKey[]): Promise<ToolExecutionRecord[]>;
  history(tenantId: string, idempotencyKey: string): Promise<LedgerEvent[]>;
  /**
   * The earlier calls of a tenant with one of these repeat digests in a scope (its run, its
   * conversation, or since a time) that took effect or may have, newest first (at most 200).
   */
  repeatsOf(tenantId: string, digests: readonly string[], scope: RepeatScope): Promise<ToolExecutionRecord[]>;
  /**
   * Inside a transaction: serialises it with every other transaction that guards one of these
   * repeat digests of the tenant, until it ends — so a tenant-wide repeat check made in it, then the
   * reservation, cannot interleave with another's (a PostgreSQL advisory transaction lock per
   * digest, taken in sorted order; SQLite's write transaction is one at a time already).
   */
  guardRepeats(tenantId: string, digests: readonly string[]): Promise<void>;
  /** A tenant's records in (attemptStartedAt, key) order: with the unknown statuses, longest waiting first. */
  list(tenantId: string, filter: ListFilter): Promise<ToolExecutionRecord[]>;
}
