import { OncelyError } from '../errors/index.js';
import { isUnknownStatus, toJsonValue, type JsonValue, type ToolExecutionRecord } from '../ledger/index.js';
import type { LedgerStore } from '../store/index.js';
import type { Ledger } from './ledger.js';
import { operatorInput } from './operator-input.js';
import { mayStillLand, stillRunning } from './settlement.js';

export interface ResolveRequest {
  readonly tenantId: string;
  readonly idempotencyKey: string;
  /** What the operator found downstream: it took effect, or it did not. */
  readonly status: 'completed' | 'failed';
  readonly reason: string;
  /** The operator's actor id, recorded in the history. */
  readonly actorId: string;
  readonly result?: unknown;
  readonly resultReference?: string | null;
  /**
   * Settle a `started` call even though its attempt may still be running (`CALL_IN_FLIGHT` without
   * it). Recorded as forced in the history; the reason should say why waiting was not an option.
   */
  readonly force?: boolean;
  /**
   * The operator checked this call together with others and settles them with one reason: recorded
   * in the history's detail (`together: { id, size }`), so each call's settlement names its batch.
   */
  readonly together?: { readonly id: string; readonly size: number };
}

/** Compare-and-set races with a late outcome are retried this many times before giving up. */
const MAX_TRIES = 5;

/**
 * An operator settles an unknown call. Compare-and-set: of two operators acting at once exactly one
 * wins; the other (and anyone acting on a call already settled) gets `LEDGER_ALREADY_SETTLED` with
 * the record as it stands. A `started` call whose attempt may still be running (its run held by a
 * live driver, a compensation hook still running, or younger than its timeout plus a margin) is
 * refused with `CALL_IN_FLIGHT` unless `force` is set; so is settling `failed` an `indeterminate`
 * call whose request may still land (it timed out, or lost its answer, less than its timeout plus
 * the margin ago): the downstream's books may not show it yet. Settling a compensation record `completed`
 * marks its call `compensated`.
 *
 * @example
 * await resolveToolCall(ledger, { tenantId: 'acme', idempotencyKey: 'run_1:call_2', status: 'failed',
 *   reason: 'no credit with this key in the billing console', actorId: 'ops-ana' });
 */
export async function resolveToolCall(ledger: Ledger, request: ResolveRequest): Promise<ToolExecutionRecord> {
  const input = operatorInput(request);
  if (request.status !== 'completed' && request.status !== 'failed') {
    throw new OncelyError(
      'LEDGER_TRANSITION_REFUSED',
      'resolve to "completed" (it took effect) or "failed" (it did not)',
    );
  }
  if (request.force !== undefined && typeof request.force !== 'boolean') {
    throw new OncelyError('LEDGER_TRANSITION_REFUSED', 'force is true or false');
  }
  const result: JsonValue | null = request.result === undefined ? null : toJsonValue(request.result);
  const actor = { kind: 'operator' as const, id: input.actorId };
  for (let i = 0; i < MAX_TRIES; i++) {
    const record = await ledger.store.ledger.get(input.tenantId, input.key);
    if (record === undefined) throw notFound(input.key);
    if (!isUnknownStatus(record.status)) throw alreadySettled(record);
    const running =
      record.status === 'started'
        ? await stillRunning(ledger, record)
        : request.status === 'failed'
          ? mayStillLand(ledger, record)
          : undefined;
    if (running !== undefined && request.force !== true) throw inFlight(record, running);
    const written = await ledger.store.transaction(async (tx) => {
      const moved = await tx.ledger.transition({
        tenantId: input.tenantId,
        idempotencyKey: input.key,
        via: 'resolve',
        to: request.status,
        expect: { status: record.status, version: record.version },
        actor,
        reason: running === undefined ? input.reason : `forced: ${input.reason}`,
        result,
        resultReference: request.resultReference ?? null,
        error: request.status === 'failed' ? { code: 'RESOLVED_NOT_TAKEN', message: input.reason } : null,
        detail: detailOf(running, request.together),
        recordIgnored: false,
      });
      if (moved.applied && request.status === 'completed' && moved.record.compensationOf !== null) {
        await markCompensated(tx.ledger, moved.record, actor, input.reason);
      }
      return moved;
    });
    if (written.applied) return written.record;
  }
  const current = await ledger.store.ledger.get(input.tenantId, input.key);
  if (current === undefined) throw notFound(input.key);
  throw alreadySettled(current);
}

function detailOf(running: string | undefined, together: ResolveRequest['together']): JsonValue | null {
  const detail: Record<string, JsonValue> = {};
  if (running !== undefined) Object.assign(detail, { forced: true, mayStillBeRunning: running });
  if (together !== undefined) detail.together = { id: together.id, size: together.size };
  return Object.keys(detail).length === 0 ? null : detail;
}

/** The compensation of `record.compensationOf` took effect: its call is now `compensated`. */
export async function markCompensated(
  tx: LedgerStore,
  compensation: ToolExecutionRecord,
  actor: { kind: 'runtime' | 'operator' | 'reconcile'; id: string },
  reason: string | null,
): Promise<void> {
  const parentKey = compensation.compensationOf;
  if (parentKey === null) return;
  const parent = await tx.get(compensation.tenantId, parentKey);
  if (parent === undefined || parent.status !== 'completed') return;
  await tx.transition({
    tenantId: parent.tenantId,
    idempotencyKey: parent.idempotencyKey,
    via: 'compensate',
    to: 'compensated',
    expect: { status: 'completed', version: parent.version },
    actor,
    reason: reason ?? `compensated by ${compensation.idempotencyKey}`,
    recordIgnored: true,
  });
}

export function notFound(key: string): OncelyError {
  return new OncelyError('LEDGER_RECORD_NOT_FOUND', `no tool call ${key} in this tenant's ledger`, {
    details: { key },
  });
}

function inFlight(record: ToolExecutionRecord, why: string): OncelyError {
  return new OncelyError(
    'CALL_IN_FLIGHT',
    `tool call ${record.idempotencyKey} is ${record.status} and may still take effect: ${why}. Settling it now ` +
      'could contradict what its attempt is about to do; wait until it settles or can no longer land, ' +
      'or resolve with force (`--force`, recorded as forced) if you are sure',
    { details: { record, why } },
  );
}

function alreadySettled(record: ToolExecutionRecord): OncelyError {
  return new OncelyError(
    'LEDGER_ALREADY_SETTLED',
    `tool call ${record.idempotencyKey} is already ${record.status}` +
      (record.settledBy ? ` (settled by ${record.settledBy.kind} ${record.settledBy.id})` : '') +
      '; nothing was changed',
    { details: { record } },
  );
}
