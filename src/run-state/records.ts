import type { ErrorInfo, JsonValue } from '../ledger/index.js';
import type { ApprovalStatus, RunStatus } from './statuses.js';

/** The kinds of thing the model can be told about a call (DESIGN §6: never "failed" for "unknown"). */
export const HEARD_KINDS = [
  'completed',
  'replayed',
  'not_attempted',
  'did_not_take_effect',
  'took_effect',
  'compensated',
  'rejected',
  'invalid_call',
  'read_failed',
  'repeat_refused',
] as const;
export type HeardKind = (typeof HEARD_KINDS)[number];

/** What the model is told about a call once it is settled: a tool result, exactly as sent. */
export interface HeardResult {
  readonly kind: HeardKind;
  /** `json` for a call that took effect (or was undone), `error-json` for one that did not. */
  readonly type: 'json' | 'error-json';
  readonly value: JsonValue;
}

/** One call of a model response, with the id the runtime minted for it. */
export interface PendingCall {
  readonly toolCallId: string;
  readonly toolName: string;
  readonly input: JsonValue;
  /** Why the call cannot run as the model made it (an unknown tool, input that is not JSON). */
  readonly problem?: string;
  /** Set once the call is settled; the model hears it when every call of the step is. */
  readonly heard?: HeardResult;
  /**
   * A repeat waiting for the earlier identical call it repeats (its key) to be settled: the run
   * waits in `awaiting_reconciliation` until that call is no longer unknown.
   */
  readonly waitsFor?: string;
}

/**
 * A run's durable state. `messages` are AI SDK model messages (JSON); `pending` holds the calls of
 * the last model response until every one of them is settled and told to the model.
 */
export interface Checkpoint {
  readonly messages: JsonValue[];
  readonly step: number;
  readonly pending: { readonly calls: readonly PendingCall[] } | null;
}

export interface RunRecord {
  readonly tenantId: string;
  readonly runId: string;
  readonly agent: string;
  readonly status: RunStatus;
  readonly input: JsonValue;
  readonly checkpoint: Checkpoint;
  readonly checkpointVersion: number;
  readonly leaseOwner: string | null;
  readonly leaseEpoch: number;
  readonly leaseExpiresAt: string | null;
  readonly result: JsonValue | null;
  readonly error: ErrorInfo | null;
  readonly statusReason: string | null;
  readonly createdAt: string;
  readonly updatedAt: string;
  /** Claims since the last drive that ended cleanly; past the runtime's maximum the run fails. */
  readonly driveAttempts: number;
  /** Model calls in a row that failed for a transient cause (requeued with backoff each time). */
  readonly modelOutages: number;
  /** What the last failed drive or model outage said (the run goes on; `error` is for a failed run). */
  readonly lastError: ErrorInfo | null;
  /** The turn under way or last answered: 1 is the run's input, each message sent to it adds one. */
  readonly turn: number;
  /** The step counter when this turn began (`max_steps` counts the model calls of a turn). */
  readonly turnStep: number;
  /** What the model responses the run kept cost, summed. */
  readonly usage: RunUsage;
  /** The prompt tokens of the run's last model call: the next call's prompt is at least as long. */
  readonly lastInputTokens: number;
  /** Tokens the run may spend in all (every turn), or null for no limit. */
  readonly tokenBudget: number | null;
}

/** Tokens of a run's model calls, summed over the responses it kept. */
export interface RunUsage {
  readonly inputTokens: number;
  readonly outputTokens: number;
  /** Output tokens spent reasoning (part of outputTokens). */
  readonly reasoningTokens: number;
  /** Input tokens read from the provider's cache (part of inputTokens). */
  readonly cachedInputTokens: number;
  /** As the provider counted them (input and output where it did not say). */
  readonly totalTokens: number;
}

/** A later turn of a run: a user message sent to it once it had answered. */
export interface RunTurn {
  readonly tenantId: string;
  readonly runId: string;
  readonly turn: number;
  /** The sender's id for the message: sending it again is the same turn. */
  readonly clientMessageId: string;
  /** Where the message is in the run's conversation (0-based). */
  readonly messageIndex: number;
  /** The digest of the message's canonical JSON: the same id with another message is refused. */
  readonly messageDigest: string;
  readonly actorId: string | null;
  readonly createdAt: string;
}

/**
 * A run without its conversation: what lists, the API, event streams and the sweep read. The messages
 * are rows of their own (append-only, one per message); reading them is for a driver and for whoever
 * asks for the conversation.
 */
export type RunSummary = Omit<RunRecord, 'checkpoint'> & {
  readonly checkpoint: Omit<Checkpoint, 'messages'>;
};

export interface RunEvent {
  /** Store-wide id; not an order a reader can page by (PostgreSQL may commit a lower id later). */
  readonly id: number;
  /** 1, 2, 3… per run, assigned under the run's row lock: page by this, it never skips. */
  readonly seq: number;
  readonly tenantId: string;
  readonly runId: string;
  readonly at: string;
  readonly type: string;
  readonly data: JsonValue;
}

export interface ApprovalRecord {
  readonly tenantId: string;
  /** The key of the call it approves: an approval is for that one call. */
  readonly idempotencyKey: string;
  readonly runId: string;
  readonly toolName: string;
  readonly args: JsonValue;
  readonly argsDigest: string;
  /**
   * Asked for because this call repeats an earlier one of its scope that took effect (`onRepeat:
   * 'ask'`): that call's key. Null for a tool's own approval of a call that repeats nothing.
   */
  readonly repeatOf: string | null;
  readonly status: ApprovalStatus;
  readonly decidedBy: string | null;
  readonly reason: string | null;
  readonly createdAt: string;
  readonly decidedAt: string | null;
  readonly consumedAt: string | null;
}
