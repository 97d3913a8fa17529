import type { ReserveRequest, TransitionRequest } from './ledger-store.js';
import { OncelyError } from '../errors/index.js';
import { UNKNOWN_STATUSES, assertTransition, contradicts, settles } from '../ledger/index.js';
import type {
  Actor,
  EffectKind,
  ErrorInfo,
  JsonValue,
  LedgerEvent,
  LedgerEventKind,
  LedgerStatus,
  ToolExecutionRecord,
  TransitionVia,
} from '../ledger/index.js';

/** A row of `tool_executions` as either driver returns it (JSON as text or parsed, times as text or Date). */
export interface ExecutionRow {
  tenant_id: string;
  idempotency_key: string;
  run_id: string;
  tool_call_id: string;
  tool_name: string;
  effect: string;
  args: unknown;
  args_digest: string;
  status: string;
  attempt: number | string;
  version: number | string;
  result: unknown;
  result_reference: string | null;
  error: unknown;
  compensation_of: string | null;
  created_at: string | Date;
  updated_at: string | Date;
  attempt_started_at: string | Date;
  settled_at: string | Date | null;
  settled_by_kind: string | null;
  settled_by_id: string | null;
  attempt_timeout_ms: number | string | null;
  conflict_at: string | Date | null;
  repeat_digest?: string | null;
  conversation_id?: string | null;
}

export interface EventRow {
  id: number | string;
  tenant_id: string;
  idempotency_key: string;
  at: string | Date;
  kind: string;
  actor_kind: string;
  actor_id: string;
  via: string | null;
  from_status: string | null;
  to_status: string | null;
  attempt: number | string;
  reason: string | null;
  detail: unknown;
}

function json<T>(value: unknown): T | null {
  if (value === null || value === undefined) return null;
  return (typeof value === 'string' ? JSON.parse(value) : value) as T;
}

function time(value: string | Date): string {
  return typeof value === 'string' ? value : value.toISOString();
}

export function toRecord(row: ExecutionRow): ToolExecutionRecord {
  return {
    tenantId: row.tenant_id,
    idempotencyKey: row.idempotency_key,
    runId: row.run_id,
    toolCallId: row.tool_call_id,
    toolName: row.tool_name,
    effect: row.effect as EffectKind,
    args: json<JsonValue>(row.args) ?? null,
    argsDigest: row.args_digest,
    status: row.status as LedgerStatus,
    attempt: Number(row.attempt),
    version: Number(row.version),
    result: json<JsonValue>(row.result),
    resultReference: row.result_reference,
    error: json<ErrorInfo>(row.error),
    compensationOf: row.compensation_of,
    createdAt: time(row.created_at),
    updatedAt: time(row.updated_at),
    attemptStartedAt: time(row.attempt_started_at),
    attemptTimeoutMs: row.attempt_timeout_ms === null ? null : Number(row.attempt_timeout_ms),
    conflictAt: row.conflict_at === null ? null : time(row.conflict_at),
    repeatDigest: row.repeat_digest ?? null,
    conversationId: row.conversation_id ?? null,
    settledAt: row.settled_at === null ? null : time(row.settled_at),
    settledBy:
      row.settled_by_kind === null || row.settled_by_id === null
        ? null
        : { kind: row.settled_by_kind as Actor['kind'], id: row.settled_by_id },
  };
}

export function toEvent(row: EventRow): LedgerEvent {
  return {
    id: Number(row.id),
    tenantId: row.tenant_id,
    idempotencyKey: row.idempotency_key,
    at: time(row.at),
    kind: row.kind as LedgerEventKind,
    actor: { kind: row.actor_kind as Actor['kind'], id: row.actor_id },
    via: row.via as TransitionVia | null,
    from: row.from_status as LedgerStatus | null,
    to: row.to_status as LedgerStatus | null,
    attempt: Number(row.attempt),
    reason: row.reason,
    detail: json<JsonValue>(row.detail),
  };
}

/** `reserveUnlessRepeat` takes a new call with a repeat digest; a re-open goes through `reserve`. */
export function assertInlineRepeat(request: ReserveRequest): void {
  if (request.repeatDigest == null || request.reopenVersion !== undefined) {
    throw new Error(
      `reserveUnlessRepeat of ${request.idempotencyKey} needs a new call with a repeat digest (a re-open goes through reserve)`,
    );
  }
}

/**
 * Checks a transition request against the table before anything is written. The `reserve` edges are
 * taken by `reserve()` alone: re-reserving also counts the attempt and clears the last outcome.
 */
export function assertTransitionRequest(request: TransitionRequest): void {
  const { idempotencyKey: key, expect, to, via } = request;
  assertTransition(key, expect.status, to, via);
  if ((via as string) === 'reserve') {
    throw new OncelyError(
      'LEDGER_TRANSITION_REFUSED',
      `tool call ${key} can be re-reserved only by reserve(), not by a transition`,
      {
        details: { key, from: expect.status, to, via },
      },
    );
  }
}

/** The column values a transition writes, decided once for both dialects. */
/** A batch of transitions names each key once (two moves of one record in one write would race). */
export function assertDistinctKeys(requests: readonly { idempotencyKey: string }[]): void {
  const keys = new Set(requests.map((r) => r.idempotencyKey));
  if (keys.size !== requests.length) {
    throw new Error('a batch of transitions names a key twice; one write moves each record once');
  }
}

export function transitionColumns(
  to: LedgerStatus,
  request: {
    result?: JsonValue | null;
    resultReference?: string | null;
    error?: ErrorInfo | null;
  },
): {
  setResult: boolean;
  result: JsonValue | null;
  resultReference: string | null;
  setError: boolean;
  error: ErrorInfo | null;
} {
  return {
    setResult: to === 'completed',
    result: request.result ?? null,
    resultReference: request.resultReference ?? null,
    // A call settled completed took effect: an earlier timeout error no longer describes it.
    setError: to === 'failed' || to === 'indeterminate' || to === 'completed',
    error: request.error ?? null,
  };
}

/**
 * The record a transition makes when it applies, as the stores write it (\`transitionColumns\`), but
 * for the times, which the database sets (\`updatedAt\` and \`settledAt\` here are \`nowMs\`, the caller's
 * clock): what a step tells the model before its write, in the write itself.
 */
export function foreseenRecord(
  record: ToolExecutionRecord,
  request: TransitionRequest,
  nowMs: number,
): ToolExecutionRecord {
  const columns = transitionColumns(request.to, request);
  const now = new Date(nowMs).toISOString();
  return {
    ...record,
    status: request.to,
    version: record.version + 1,
    updatedAt: now,
    ...(columns.setResult ? { result: columns.result, resultReference: columns.resultReference } : {}),
    ...(columns.setError ? { error: columns.error } : {}),
    ...(settles(request.to) ? { settledAt: now, settledBy: request.actor } : {}),
  };
}

/** How a lost compare-and-set goes into the history: a contradiction is a `conflict`, else `ignored`. */
export function lossKind(
  request: TransitionRequest,
  current: Pick<ToolExecutionRecord, 'status' | 'attempt'>,
): 'conflict' | 'ignored' {
  const attempt = request.attempt ?? current.attempt;
  const observed = { via: request.via, to: request.to, attempt, keyed: request.keyed ?? false };
  return contradicts(observed, current) ? 'conflict' : 'ignored';
}

/** What an ignored outcome carried, so the history shows what arrived too late. */
export function ignoredDetail(request: TransitionRequest, ignored: boolean): unknown {
  if (!ignored) return request.detail ?? null;
  return {
    ...(request.detail !== undefined && request.detail !== null ? { detail: request.detail } : {}),
    expected: request.expect,
    ...(request.result !== undefined ? { result: request.result } : {}),
    ...(request.resultReference !== undefined ? { resultReference: request.resultReference } : {}),
    ...(request.error !== undefined ? { error: request.error } : {}),
  };
}

/**
 * The unknown statuses written out literally, exactly as the partial indexes `tool_executions_unknown`
 * and `tool_executions_unknown_all` are defined in the dialects' migrations, so the planner can use them.
 */
export const UNKNOWN_PREDICATE = `status IN (${UNKNOWN_STATUSES.map((s) => `'${s}'`).join(', ')})`;

export function isUnknownSet(statuses: readonly LedgerStatus[]): boolean {
  return statuses.length === UNKNOWN_STATUSES.length && UNKNOWN_STATUSES.every((s) => statuses.includes(s));
}

/** A value as the JSON text a column stores; null (SQL NULL) for null or undefined. */
export function encodeJson(value: unknown): string | null {
  return value === null || value === undefined ? null : JSON.stringify(value);
}
