import type { ErrorInfo, JsonValue } from '../ledger/index.js';
import { ZERO_USAGE, addUsage } from '../run-state/index.js';
import type {
  ApprovalRecord,
  ApprovalStatus,
  Checkpoint,
  RunEvent,
  RunRecord,
  RunStatus,
  RunSummary,
  RunTurn,
  RunUsage,
} from '../run-state/index.js';
import type {
  SaveCheckpointRequest,
  SendMessageRequest,
  SendMessageResult,
  TenantUsage,
  WaitingRun,
} from './run-store.js';

type Time = string | Date;

/** A run's columns, named (its conversation is in run_messages). */
export const RUN_COLUMNS = `tenant_id, run_id, agent, status, input, step, pending, message_count, checkpoint_version,
  lease_owner, lease_epoch, lease_expires_at, result, error, status_reason, created_at, updated_at, drive_attempts,
  model_outages, last_error, turn, turn_step, input_tokens, output_tokens, reasoning_tokens, cached_input_tokens,
  total_tokens, last_input_tokens, token_budget`;

/** The messages a save appends: those past the ones the run holds already. */
export function appendedMessages(request: SaveCheckpointRequest): readonly JsonValue[] {
  const { messages } = request.checkpoint;
  const stored = request.storedMessages;
  if (!Number.isInteger(stored) || stored < 0 || stored > messages.length) {
    throw new Error(
      `a save says the run holds ${stored} of its ${messages.length} messages; a conversation only grows`,
    );
  }
  return messages.slice(stored);
}

export interface RunRow {
  tenant_id: string;
  run_id: string;
  agent: string;
  status: string;
  input: unknown;
  step: number | string;
  pending: unknown;
  message_count: number | string;
  checkpoint_version: number | string;
  lease_owner: string | null;
  lease_epoch: number | string;
  lease_expires_at: Time | null;
  result: unknown;
  error: unknown;
  status_reason: string | null;
  created_at: Time;
  updated_at: Time;
  drive_attempts: number | string;
  model_outages: number | string;
  last_error: unknown;
  turn: number | string;
  turn_step: number | string;
  input_tokens: number | string;
  output_tokens: number | string;
  reasoning_tokens: number | string;
  cached_input_tokens: number | string;
  total_tokens: number | string;
  last_input_tokens: number | string;
  token_budget: number | string | null;
}

export interface RunTurnRow {
  tenant_id: string;
  run_id: string;
  turn: number | string;
  client_message_id: string;
  message_idx: number | string;
  message_digest: string;
  actor_id: string | null;
  created_at: Time;
}

export interface RunEventRow {
  id: number | string;
  seq: number | string;
  tenant_id: string;
  run_id: string;
  at: Time;
  type: string;
  data: unknown;
}

export interface ApprovalRow {
  tenant_id: string;
  idempotency_key: string;
  run_id: string;
  tool_name: string;
  args: unknown;
  args_digest: string;
  repeat_of?: string | null;
  status: string;
  decided_by: string | null;
  reason: string | null;
  created_at: Time;
  decided_at: Time | null;
  consumed_at: Time | null;
}

function json<T>(value: unknown): T | null {
  if (value === null || value === undefined) return null;
  return (typeof value === 'string' ? JSON.parse(value) : value) as T;
}

const time = (value: Time): string => (typeof value === 'string' ? value : value.toISOString());
const maybeTime = (value: Time | null): string | null => (value === null ? null : time(value));

/** A run row with its messages, in order (a JSON array, as the read aggregates them). */
export type RunWithMessagesRow = RunRow & { messages: unknown };

/**
 * A run with its conversation: the row, and its messages as the read aggregated them or, for a run
 * just written, as the caller wrote them.
 */
export function toRun(row: RunRow & { messages?: unknown }, messages?: readonly JsonValue[]): RunRecord {
  const summary = toRunSummary(row);
  const held = messages ?? json<JsonValue[]>(row.messages) ?? [];
  if (held.length !== Number(row.message_count)) {
    throw new Error(
      `run ${row.run_id} holds ${row.message_count} messages but ${held.length} were read; its conversation is incomplete`,
    );
  }
  return { ...summary, checkpoint: { ...summary.checkpoint, messages: [...held] } };
}

/** A run without its conversation (lists, the API, the sweep). */
export function toRunSummary(row: RunRow): RunSummary {
  return {
    tenantId: row.tenant_id,
    runId: row.run_id,
    agent: row.agent,
    status: row.status as RunStatus,
    input: json<JsonValue>(row.input),
    checkpoint: { step: Number(row.step), pending: json<Checkpoint['pending']>(row.pending) },
    checkpointVersion: Number(row.checkpoint_version),
    leaseOwner: row.lease_owner,
    leaseEpoch: Number(row.lease_epoch),
    leaseExpiresAt: maybeTime(row.lease_expires_at),
    result: json<JsonValue>(row.result),
    error: json<ErrorInfo>(row.error),
    statusReason: row.status_reason,
    createdAt: time(row.created_at),
    updatedAt: time(row.updated_at),
    driveAttempts: Number(row.drive_attempts),
    modelOutages: Number(row.model_outages),
    lastError: json<ErrorInfo>(row.last_error),
    turn: Number(row.turn),
    turnStep: Number(row.turn_step),
    usage: {
      inputTokens: Number(row.input_tokens),
      outputTokens: Number(row.output_tokens),
      reasoningTokens: Number(row.reasoning_tokens),
      cachedInputTokens: Number(row.cached_input_tokens),
      totalTokens: Number(row.total_tokens),
    },
    lastInputTokens: Number(row.last_input_tokens),
    tokenBudget: row.token_budget === null ? null : Number(row.token_budget),
  };
}

export function toRunTurn(row: RunTurnRow): RunTurn {
  return {
    tenantId: row.tenant_id,
    runId: row.run_id,
    turn: Number(row.turn),
    clientMessageId: row.client_message_id,
    messageIndex: Number(row.message_idx),
    messageDigest: row.message_digest,
    actorId: row.actor_id,
    createdAt: time(row.created_at),
  };
}

export interface WaitingRow {
  tenant_id: string;
  run_id: string;
  status: string;
  updated_at: Time;
  pending: unknown;
}

export function toWaiting(row: WaitingRow): WaitingRun {
  return {
    tenantId: row.tenant_id,
    runId: row.run_id,
    status: row.status as RunStatus,
    updatedAt: time(row.updated_at),
    pending: json<Checkpoint['pending']>(row.pending),
  };
}

export function toRunEvent(row: RunEventRow): RunEvent {
  return {
    id: Number(row.id),
    seq: Number(row.seq),
    tenantId: row.tenant_id,
    runId: row.run_id,
    at: time(row.at),
    type: row.type,
    data: json<JsonValue>(row.data),
  };
}

export function toApproval(row: ApprovalRow): ApprovalRecord {
  return {
    tenantId: row.tenant_id,
    idempotencyKey: row.idempotency_key,
    runId: row.run_id,
    toolName: row.tool_name,
    args: json<JsonValue>(row.args),
    argsDigest: row.args_digest,
    repeatOf: row.repeat_of ?? null,
    status: row.status as ApprovalStatus,
    decidedBy: row.decided_by,
    reason: row.reason,
    createdAt: time(row.created_at),
    decidedAt: maybeTime(row.decided_at),
    consumedAt: maybeTime(row.consumed_at),
  };
}

/** A waiting or final status ends the driver's lease; `running` keeps it. */
export function releasesLease(status: RunStatus): boolean {
  return status !== 'running';
}

/** A message id sent before: the same message is that turn again; another message is refused. */
/**
 * A message SEND_MESSAGE sent, from what it returned (both stores): the run as it now stands (queued
 * for its turn, the message the last of its conversation) and when the turn was written.
 */
export function sentMessage(
  request: SendMessageRequest,
  row: RunRow,
  turnCreatedAt: Time,
): SendMessageResult {
  const run = toRunSummary(row);
  return {
    kind: 'sent',
    run,
    turn: {
      tenantId: request.tenantId,
      runId: request.runId,
      turn: run.turn,
      clientMessageId: request.clientMessageId,
      messageIndex: Number(row.message_count) - 1,
      messageDigest: request.messageDigest,
      actorId: request.actorId,
      createdAt: time(turnCreatedAt),
    },
  };
}

/**
 * Why SEND_MESSAGE sent nothing (both stores), from what was read after it: no run (undefined); this
 * id sent before (the earlier turn: `replayed` with the same message, `mismatch` with another); or
 * the run not waiting for a message (`not_ready`).
 */
export function unsentMessage(
  request: SendMessageRequest,
  earlier: RunTurnRow | undefined,
  row: RunRow | undefined,
): SendMessageResult | undefined {
  if (row === undefined) return undefined;
  const run = toRunSummary(row);
  if (earlier === undefined) return { kind: 'not_ready', run };
  const turn = toRunTurn(earlier);
  return { kind: turn.messageDigest === request.messageDigest ? 'replayed' : 'mismatch', turn, run };
}

/** A row of a tenant's usage by agent (sums are text where the driver reads bigint sums as numeric). */
export interface UsageRow {
  agent: string;
  runs: number | string;
  input_tokens: number | string | null;
  output_tokens: number | string | null;
  reasoning_tokens: number | string | null;
  cached_input_tokens: number | string | null;
  total_tokens: number | string | null;
}

/** A tenant's usage from its rows by agent. */
export function tenantUsage(rows: readonly UsageRow[]): TenantUsage {
  const byAgent = rows.map((row) => ({
    agent: row.agent,
    runs: Number(row.runs),
    usage: {
      inputTokens: Number(row.input_tokens ?? 0),
      outputTokens: Number(row.output_tokens ?? 0),
      reasoningTokens: Number(row.reasoning_tokens ?? 0),
      cachedInputTokens: Number(row.cached_input_tokens ?? 0),
      totalTokens: Number(row.total_tokens ?? 0),
    },
  }));
  return {
    runs: byAgent.reduce((n, a) => n + a.runs, 0),
    usage: byAgent.reduce((sum, a) => addUsage(sum, a.usage), ZERO_USAGE),
    byAgent,
  };
}

/** SQLite SAVE's usage parameters: what the saved response adds (nothing when it keeps none). */
export function usageParams(usage: RunUsage | undefined): Record<string, number> {
  const u = usage ?? ZERO_USAGE;
  return {
    inputTokens: u.inputTokens,
    outputTokens: u.outputTokens,
    reasoningTokens: u.reasoningTokens,
    cachedInputTokens: u.cachedInputTokens,
    totalTokens: u.totalTokens,
    counted: usage === undefined ? 0 : 1,
  };
}
