import type { ErrorInfo, JsonValue } from '../ledger/index.js';
import type {
  ApprovalRecord,
  Checkpoint,
  CheckpointStatus,
  RunEvent,
  RunRecord,
  RunStatus,
  RunSummary,
  RunTurn,
  RunUsage,
} from '../run-state/index.js';

/** A waiting run as the sweep reads it: what it waits on (its pending calls), not its conversation. */
export interface WaitingRun {
  readonly tenantId: string;
  readonly runId: string;
  readonly status: RunStatus;
  readonly updatedAt: string;
  readonly pending: Checkpoint['pending'];
}

export interface CreateRunRequest {
  readonly tenantId: string;
  readonly runId: string;
  readonly agent: string;
  readonly input: JsonValue;
  readonly checkpoint: Checkpoint;
  /**
   * Create it already claimed by `owner` (as `claim` would leave it: `running`, epoch 1, one drive
   * attempt, events `run.created` then `run.claimed`), in the same write. A run that exists is left
   * as it stands, unclaimed.
   */
  readonly claim?: { readonly owner: string; readonly leaseMs: number };
  /** Tokens the run may spend in all; null or absent for no limit. */
  readonly tokenBudget?: number | null;
}

/** The driver's claim on a run: every write it makes compares both. */
export interface RunFence {
  readonly tenantId: string;
  readonly runId: string;
  readonly leaseEpoch: number;
  readonly checkpointVersion: number;
}

/** An event to append to a run's stream, written with the change it describes. */
export interface RunEventInput {
  readonly type: string;
  readonly data: JsonValue;
}

export interface SaveCheckpointRequest {
  readonly fence: RunFence;
  /**
   * The run's state after this save. Its conversation only grows: the first `storedMessages` of its
   * messages are the ones the run already holds, and only the rest are written (appended, one row
   * each); the step counter and the pending calls are written whole (they are the step's, not the run's).
   */
  readonly checkpoint: Checkpoint;
  /**
   * How many of `checkpoint.messages` the run holds already (as it was claimed or last saved): part of
   * the fence, so a save can never append at the wrong place.
   */
  readonly storedMessages: number;
  readonly status: CheckpointStatus;
  readonly result?: JsonValue | null;
  readonly error?: ErrorInfo | null;
  readonly reason?: string | null;
  /** Events appended in the same statement or transaction. */
  readonly events?: readonly RunEventInput[];
  /** The model answered in this step: its run of outages ends. */
  readonly modelAnswered?: boolean;
  /**
   * What the model response this save keeps cost: added to the run's usage in the same write (a
   * response is saved once, so it counts once); its input tokens become the run's `lastInputTokens`.
   */
  readonly usage?: RunUsage;
  /**
   * Renew the lease in the same write, as `renewLease` would (held by this owner and not expired, or
   * nothing is saved): a step's response saved with its reservations costs no statement of its own.
   */
  readonly renewLease?: { readonly owner: string; readonly leaseMs: number };
}

/**
 * A driver lets go of a running run it cannot take further now, to be claimed again at `retryAt`
 * (queued, no lease): a drive that threw (its attempts keep counting), a model outage, or a call
 * whose last attempt may still land.
 */
export interface ReleaseRequest {
  readonly fence: Omit<RunFence, 'checkpointVersion'>;
  readonly delayMs: number;
  readonly reason: string;
  readonly lastError?: ErrorInfo | null;
  /**
   * Why: `failed_drive` keeps counting drive attempts; the others end the drive cleanly (`shutdown`:
   * the process stopped and hands the run to another).
   */
  readonly cause: 'failed_drive' | 'model_outage' | 'waiting' | 'shutdown';
}

/** A user message sent to a run that has answered: the next turn. */
export interface SendMessageRequest {
  readonly tenantId: string;
  readonly runId: string;
  /** The sender's id for the message, unique within the run: sending it again is the same turn. */
  readonly clientMessageId: string;
  /** The user message (an AI SDK `ModelMessage` of role `user`), appended to the conversation. */
  readonly message: JsonValue;
  /** The digest of the message's canonical JSON. */
  readonly messageDigest: string;
  readonly actorId: string | null;
  readonly reason: string;
}

/**
 * What became of a message sent: `sent` (the run is queued for its new turn), `replayed` (this id was
 * sent before with the same message: that turn), `mismatch` (this id was sent before with another
 * message: refused), `not_ready` (the run is not waiting for a message: it has not answered, or it
 * failed or was cancelled). Undefined when the run does not exist.
 */
export type SendMessageResult =
  | { readonly kind: 'sent' | 'replayed' | 'mismatch'; readonly turn: RunTurn; readonly run: RunSummary }
  | { readonly kind: 'not_ready'; readonly run: RunSummary };

/** Which of a tenant's runs a usage sum covers: those created in [from, to). */
export interface UsageFilter {
  readonly from?: string;
  readonly to?: string;
}

/** A tenant's usage: the runs counted and their tokens, in all and by agent. */
export interface TenantUsage {
  readonly runs: number;
  readonly usage: RunUsage;
  readonly byAgent: readonly { readonly agent: string; readonly runs: number; readonly usage: RunUsage }[];
}

/** A position in the waiting runs' order. */
export interface WaitingCursor {
  readonly at: string;
  readonly tenantId: string;
  readonly runId: string;
}

export interface RunListFilter {
  readonly statuses?: readonly RunStatus[];
  readonly agent?: string;
  readonly limit: number;
  readonly after?: { readonly at: string; readonly runId: string };
}

export interface ApprovalListFilter {
  readonly statuses?: readonly ApprovalRecord['status'][];
  readonly limit: number;
  /** Approvals strictly after this position in (createdAt, key) order. */
  readonly after?: { readonly at: string; readonly key: string };
}

export interface NewApproval {
  readonly tenantId: string;
  readonly idempotencyKey: string;
  readonly runId: string;
  readonly toolName: string;
  readonly args: JsonValue;
  readonly argsDigest: string;
  /** The key of the earlier call this one repeats, when the approval is asked for a repeat. */
  readonly repeatOf?: string | null;
}

/** Runs, their events and approvals. Every write is compare-and-set; driver writes are fenced. */
export interface RunStore {
  /** Inserts the run unless one with that id exists; returns the run that stands either way. */
  create(request: CreateRunRequest): Promise<{ created: boolean; run: RunRecord }>;
  /** The run with its whole conversation (its messages read in order). */
  get(tenantId: string, runId: string): Promise<RunRecord | undefined>;
  /** The run without its conversation: one row, whatever the run's length. */
  summary(tenantId: string, runId: string): Promise<RunSummary | undefined>;
  /** A page of a tenant's runs, without their conversations. */
  list(tenantId: string, filter: RunListFilter): Promise<RunSummary[]>;
  /**
   * Claims one run that is `queued`, or `running` with an expired lease (its driver died or froze):
   * status `running`, a new owner, `lease_epoch + 1`. Of two claimers exactly one wins. With
   * `agents`, only runs of those agents (a worker claims what it can drive).
   */
  claimNext(owner: string, leaseMs: number, agents?: readonly string[]): Promise<RunRecord | undefined>;
  /** Claims this run if it is claimable (as `claimNext`), and with `agents`, only if it is of one of them. */
  claim(
    tenantId: string,
    runId: string,
    owner: string,
    leaseMs: number,
    agents?: readonly string[],
  ): Promise<RunRecord | undefined>;
  /** Extends the lease if this owner still holds it at this epoch; false means the lease is lost. */
  renewLease(fence: Omit<RunFence, 'checkpointVersion'>, owner: string, leaseMs: number): Promise<boolean>;
  /**
   * Saves the checkpoint and status if the run is `running` at this epoch, checkpoint version and
   * message count (appending the new messages only); a final or waiting status releases the lease. Returns the new version, or undefined when fenced out.
   */
  saveCheckpoint(request: SaveCheckpointRequest): Promise<number | undefined>;
  /** Lets go of a running run at this epoch, queued again after a delay; false when fenced out. */
  release(request: ReleaseRequest): Promise<boolean>;
  /**
   * An operator re-drives a `failed` run from its last checkpoint: `queued`, its error and counters
   * cleared. Undefined when the run is not failed.
   */
  retry(tenantId: string, runId: string, reason: string, actorId: string): Promise<RunRecord | undefined>;
  /**
   * A completed run takes the next user message: appended to its conversation, a turn row written,
   * and the run `queued` for a worker, in one write; the same client message id again is that turn.
   */
  sendMessage(request: SendMessageRequest): Promise<SendMessageResult | undefined>;
  /** A run's later turns (2, 3, …), in order. */
  turns(tenantId: string, runId: string): Promise<RunTurn[]>;
  /** The tokens of a tenant's runs created in the filter's window, summed. */
  usage(tenantId: string, filter: UsageFilter): Promise<TenantUsage>;
  /** `from` (a waiting status) → `queued`, so a worker picks the run up again. */
  requeue(tenantId: string, runId: string, from: readonly RunStatus[], reason: string): Promise<boolean>;
  /** Cancels a run that is not final; bumps the epoch so whoever drives it stands down. */
  cancel(tenantId: string, runId: string, reason: string, actorId: string): Promise<RunRecord | undefined>;
  /**
   * Runs in a waiting status, across tenants, in (updatedAt, tenantId, runId) order, strictly after
   * `after` when given: the resume sweep pages through all of them, not only the oldest. Each with
   * its pending calls, not its whole checkpoint.
   */
  listWaiting(status: RunStatus, limit: number, after?: WaitingCursor): Promise<WaitingRun[]>;
  appendEvent(tenantId: string, runId: string, type: string, data: JsonValue): Promise<void>;
  /** A run's events with `seq` greater than `afterSeq`, in order. */
  events(tenantId: string, runId: string, afterSeq: number, limit: number): Promise<RunEvent[]>;
  /** A run's newest `run.claimed` events, newest first: who drove it before (a worker's log says). */
  lastClaims(tenantId: string, runId: string, limit: number): Promise<RunEvent[]>;

  createApprovals(approvals: readonly NewApproval[]): Promise<void>;
  getApproval(tenantId: string, idempotencyKey: string): Promise<ApprovalRecord | undefined>;
  approvalsOfRun(tenantId: string, runId: string): Promise<ApprovalRecord[]>;
  /** The approvals of these runs, of any tenants (in no particular order): one read. */
  approvalsOfRuns(
    runs: readonly { readonly tenantId: string; readonly runId: string }[],
  ): Promise<ApprovalRecord[]>;
  listApprovals(tenantId: string, filter: ApprovalListFilter): Promise<ApprovalRecord[]>;
  /** `pending` → `approved` | `rejected`, compare-and-set; undefined when it was not pending. */
  decideApproval(
    tenantId: string,
    idempotencyKey: string,
    decision: 'approved' | 'rejected',
    actorId: string,
    reason: string | null,
  ): Promise<ApprovalRecord | undefined>;
  /** `approved` → `consumed` for exactly this digest; false when there was nothing to consume. */
  consumeApproval(tenantId: string, idempotencyKey: string, argsDigest: string): Promise<boolean>;
}
