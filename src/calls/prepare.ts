import { OncelyError } from '../errors/index.js';
import {
  argsDigest,
  assertCallIds,
  assertTenantId,
  idempotencyKey,
  isValidId,
  toJsonValue,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import type { ReserveRequest } from '../store/index.js';
import { assertTool, attemptBudgetMs, parseToolArgs, repeatDigestOf, type Tool } from '../tools/index.js';

export interface CallIdentity {
  readonly runId: string;
  readonly toolCallId: string;
  readonly tenantId: string;
}

export interface ToolCallRequest extends CallIdentity {
  readonly tool: Tool;
  readonly args: unknown;
  /** The conversation the call is made in, when the caller has one: a repeat's scope. */
  readonly conversationId?: string;
}

/** A validated call: its parsed arguments and the reservation that stands for it in the ledger. */
export interface PreparedCall {
  readonly tool: Tool;
  readonly args: unknown;
  readonly request: ReserveRequest;
}

/** Validates ids and arguments (`TOOL_ARGS_INVALID`, `LEDGER_KEY_INVALID`); writes nothing. */
export function prepareCall(call: ToolCallRequest): PreparedCall {
  assertTool(call.tool);
  assertTenantId(call.tenantId);
  assertCallIds(call.runId, call.toolCallId);
  if (call.conversationId !== undefined && !isValidId(call.conversationId)) {
    throw new OncelyError(
      'LEDGER_KEY_INVALID',
      `conversation id ${JSON.stringify(call.conversationId)} is not valid; use 1-128 characters of A-Z a-z 0-9 _ . -`,
    );
  }
  const args = parseToolArgs(call.tool, call.args);
  const stored = toJsonValue(args);
  const digest = argsDigest(stored);
  return {
    tool: call.tool,
    args,
    request: {
      tenantId: call.tenantId,
      idempotencyKey: idempotencyKey(call.runId, call.toolCallId),
      runId: call.runId,
      toolCallId: call.toolCallId,
      toolName: call.tool.name,
      effect: call.tool.effect.kind,
      args: stored,
      argsDigest: digest,
      compensationOf: null,
      attemptTimeoutMs: attemptBudgetMs(call.tool.effect, call.tool.timeoutMs),
      repeatDigest: repeatDigestOf(call.tool, args, digest),
      conversationId: call.conversationId ?? null,
    },
  };
}

export function assertBatch(prepared: readonly PreparedCall[]): void {
  const tenants = new Set(prepared.map((p) => p.request.tenantId));
  const keys = new Set(prepared.map((p) => p.request.idempotencyKey));
  if (tenants.size > 1 || keys.size !== prepared.length) {
    throw new OncelyError(
      'LEDGER_BATCH_INVALID',
      'the calls of one batch must share one tenant and have distinct tool call ids',
    );
  }
}

/** A key is bound to one call: a replay with another tool or other arguments is refused, nothing runs. */
export function assertSameCall(call: PreparedCall, record: ToolExecutionRecord): void {
  if (record.argsDigest === call.request.argsDigest && record.toolName === call.request.toolName) return;
  const what =
    record.toolName !== call.request.toolName ? `tool "${record.toolName}"` : 'different arguments';
  throw new OncelyError(
    'LEDGER_ARGS_MISMATCH',
    `tool call ${record.idempotencyKey} was first made with ${what}; a key is bound to one call, so this ` +
      `replay was refused and nothing ran. Mint a new tool call id for a new call.`,
    {
      details: {
        key: record.idempotencyKey,
        recordedTool: record.toolName,
        recordedDigest: record.argsDigest,
        attemptedTool: call.request.toolName,
        attemptedDigest: call.request.argsDigest,
      },
    },
  );
}
