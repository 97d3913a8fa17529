import { OncelyError } from '../errors/index.js';
import { isUnknownStatus, toJsonValue, type JsonValue, type ToolExecutionRecord } from '../ledger/index.js';
import type { LedgerStore } from '../store/index.js';
import type { Ledger } from './ledger.js';
import { operatorInput } from './operator-input.js';

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
}

/** Compare-and-set races with a late outcome are retried this many times before giving up. */
const MAX_TRIES = 5;

/**
 * An operator settles an unknown call. Compare-and-set: of two operators acting at once exactly one
 * wins; the other (and anyone acting on a call already settled) gets `LEDGER_ALREADY_SETTLED` with
 * the record as it stands. Settling a compensation record `completed` marks its call `compensated`.
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
  const result: JsonValue | null = request.result === undefined ? null : toJsonValue(request.result);
  const actor = { kind: 'operator' as const, id: input.actorId };
  for (let i = 0; i < MAX_TRIES; i++) {
    const record = await ledger.store.ledger.get(input.tenantId, input.key);
    if (record === undefined) throw notFound(input.key);
    if (!isUnknownStatus(record.status)) throw alreadySettled(record);
    const written = await ledger.store.transaction(async (tx) => {
      const moved = await tx.ledger.transition({
        tenantId: input.tenantId,
        idempotencyKey: input.key,
        via: 'resolve',
        to: request.status,
        expect: { status: record.status, version: record.version },
        actor,
        reason: input.reason,
        result,
        resultReference: request.resultReference ?? null,
        error: request.status === 'failed' ? { code: 'RESOLVED_NOT_TAKEN', message: input.reason } : null,
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

function alreadySettled(record: ToolExecutionRecord): OncelyError {
  return new OncelyError(
    'LEDGER_ALREADY_SETTLED',
    `tool call ${record.idempotencyKey} is already ${record.status}` +
      (record.settledBy ? ` (settled by ${record.settledBy.kind} ${record.settledBy.id})` : '') +
      '; nothing was changed',
    { details: { record } },
  );
}
