import {
  assertTenantId,
  attemptDeadline,
  parseKey,
  type LedgerEvent,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import type { ListCursor } from '../store/index.js';
import type { Ledger } from './ledger.js';

/** A record with its whole history, or undefined when the tenant has no such call. */
export async function getToolCall(
  ledger: Ledger,
  tenantId: string,
  idempotencyKey: string,
): Promise<{ record: ToolExecutionRecord; history: LedgerEvent[] } | undefined> {
  assertTenantId(tenantId);
  parseKey(idempotencyKey);
  const record = await ledger.store.ledger.get(tenantId, idempotencyKey);
  if (record === undefined) return undefined;
  return { record, history: await ledger.store.ledger.history(tenantId, idempotencyKey) };
}

/**
 * A tenant's unknown calls (`isUnknownCall`: their last attempt can no longer land and nobody has
 * recorded what it did; calls in flight are left out), longest unknown first, by the deadline of
 * their last attempt. `after` is the position of the last call of the page before: its key and
 * `attemptDeadline` (`unknownCallCursor`).
 */
export async function listUnknownCalls(
  ledger: Ledger,
  tenantId: string,
  options: { limit?: number; after?: ListCursor; runId?: string; toolName?: string } = {},
): Promise<ToolExecutionRecord[]> {
  assertTenantId(tenantId);
  return ledger.store.monitor.unknownCalls(tenantId, {
    limit: Math.min(Math.max(options.limit ?? 50, 1), 500),
    marginMs: ledger.landingMarginMs,
    ...(options.runId === undefined ? {} : { runId: options.runId }),
    ...(options.toolName === undefined ? {} : { toolName: options.toolName }),
    ...(options.after === undefined ? {} : { after: options.after }),
  });
}

/** The position of an unknown call in the list's order, to page on after it. */
export function unknownCallCursor(record: ToolExecutionRecord): ListCursor {
  return { at: new Date(attemptDeadline(record)).toISOString(), key: record.idempotencyKey };
}
