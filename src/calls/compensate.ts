import { OncelyError } from '../errors/index.js';
import {
  argsDigest,
  compensationKey,
  type Actor,
  type LedgerStatus,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import type { ReserveRequest, ReserveResult } from '../store/index.js';
import { assertTool, type Tool } from '../tools/index.js';
import { runAttempts } from './attempt.js';
import type { Ledger } from './ledger.js';
import { operatorInput } from './operator-input.js';
import { recordOutcome } from './record-outcome.js';
import { markCompensated, notFound } from './resolve.js';

export interface CompensateRequest {
  readonly tenantId: string;
  readonly idempotencyKey: string;
  readonly reason: string;
  /** The operator asking; the runtime never compensates by itself. */
  readonly actorId: string;
}

export interface CompensationOutcome {
  /**
   * `compensated`: undone; `failed`: the hook refused before acting (try again later);
   * `in_progress`: a request is running the hook now, or its last attempt may still land (look
   * again; nothing runs it a second time meanwhile); `unknown`: the compensation's outcome is not
   * known (its process died, or it timed out): settle the compensation record.
   */
  readonly status: 'compensated' | 'failed' | 'in_progress' | 'unknown';
  readonly record: ToolExecutionRecord;
  readonly compensation: ToolExecutionRecord;
}

/**
 * An operator undoes a completed call by running its tool's compensation hook, itself a once-only
 * side effect with its own record `<key>:compensation`. Asking twice, even at the same moment, runs
 * the hook once; the second answer is the first one's record.
 *
 * @example
 * await compensateToolCall(ledger, issueCredit, { tenantId: 'acme', idempotencyKey: 'run_1:call_3',
 *   reason: 'customer was credited by mistake', actorId: 'ops-ana' });
 */
export async function compensateToolCall(
  ledger: Ledger,
  tool: Tool,
  request: CompensateRequest,
): Promise<CompensationOutcome> {
  assertTool(tool);
  const input = operatorInput(request);
  const record = await ledger.store.ledger.get(input.tenantId, input.key);
  if (record === undefined) throw notFound(input.key);
  const hook = tool.compensate;
  if (record.toolName !== tool.name || record.compensationOf !== null || hook === undefined) {
    throw notCompensable(
      record,
      record.toolName !== tool.name
        ? `it was made by tool "${record.toolName}", not "${tool.name}"`
        : hook === undefined
          ? `tool "${tool.name}" has no compensate hook`
          : 'it is itself a compensation',
    );
  }
  if (record.status !== 'completed' && record.status !== 'compensated') {
    throw notCompensable(record, `it is ${record.status}; only a completed call can be compensated`);
  }
  const args = { compensates: record.idempotencyKey };
  const reserveRequest: ReserveRequest = {
    tenantId: record.tenantId,
    idempotencyKey: compensationKey(record.idempotencyKey),
    runId: record.runId,
    toolCallId: record.toolCallId,
    toolName: record.toolName,
    effect: record.effect === 'read' ? 'write' : record.effect,
    args,
    argsDigest: argsDigest(args),
    compensationOf: record.idempotencyKey,
    attemptTimeoutMs: tool.timeoutMs,
  };
  const actor = { kind: 'operator' as const, id: input.actorId };
  const reservation = await reserveCompensation(ledger, reserveRequest, actor);
  if (reservation.kind === 'existing') return answer(ledger, record, reservation.record);

  const compensation = reservation.record;
  const outcome = await runAttempts({
    effect: { ...tool.effect, kind: reserveRequest.effect, attempts: 1 },
    timeoutMs: tool.timeoutMs,
    clock: ledger.clock,
    random: ledger.random,
    context: {
      idempotencyKey: compensation.idempotencyKey,
      runId: compensation.runId,
      toolCallId: compensation.toolCallId,
      tenantId: compensation.tenantId,
      attempt: compensation.attempt,
    },
    run: (context) => hook(record, context),
    onExecution: (execution) =>
      ledger.holdAttempt(compensation.tenantId, compensation.idempotencyKey, execution),
  });
  const written = await recordOutcome(
    {
      ledger,
      record: compensation,
      resultReference: () => null,
      keyed: tool.downstreamAcceptsKey,
      onCompleted: (tx, done) => markCompensated(tx, done, actor, input.reason),
    },
    outcome,
  );
  return answer(ledger, record, written);
}

/**
 * Reserves the compensation record, or re-opens a `failed` one as the decision table says: only once
 * its last attempt can no longer land (a hook still running, here or elsewhere, is never run twice).
 */
async function reserveCompensation(
  ledger: Ledger,
  request: ReserveRequest,
  actor: Actor,
): Promise<ReserveResult> {
  const [reservation] = await ledger.store.ledger.reserve([request], actor);
  if (reservation === undefined) throw new Error('reserve returned nothing');
  if (reservation.kind === 'reserved') return reservation;
  const existing = reservation.record;
  if (ledger.decide(existing, 'guarded', false).action !== 'reopen') return reservation;
  const [reopened] = await ledger.store.ledger.reserve(
    [{ ...request, reopenVersion: existing.version }],
    actor,
  );
  return reopened ?? reservation;
}

async function answer(
  ledger: Ledger,
  record: ToolExecutionRecord,
  compensation: ToolExecutionRecord,
): Promise<CompensationOutcome> {
  const current = (await ledger.store.ledger.get(record.tenantId, record.idempotencyKey)) ?? record;
  const status =
    compensation.status === 'started' && !ledger.mayLand(compensation)
      ? 'unknown'
      : compensation.status === 'failed' && ledger.mayLand(compensation)
        ? 'in_progress'
        : COMPENSATION_STATUS[compensation.status];
  return { status, record: current, compensation };
}

const COMPENSATION_STATUS = {
  completed: 'compensated',
  compensated: 'compensated',
  failed: 'failed',
  started: 'in_progress',
  indeterminate: 'unknown',
} as const satisfies Record<LedgerStatus, CompensationOutcome['status']>;

function notCompensable(record: ToolExecutionRecord, why: string): OncelyError {
  return new OncelyError(
    'LEDGER_NOT_COMPENSABLE',
    `tool call ${record.idempotencyKey} cannot be compensated: ${why}`,
    {
      details: { key: record.idempotencyKey, status: record.status },
    },
  );
}
