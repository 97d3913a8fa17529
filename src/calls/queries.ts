import {
  UNKNOWN_STATUSES,
  assertTenantId,
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

/** A tenant's unknown calls (`started`, `indeterminate`), longest waiting first. */
export async function listUnknownCalls(
  ledger: Ledger,
  tenantId: string,
  options: { limit?: number; after?: ListCursor } = {},
): Promise<ToolExecutionRecord[]> {
  assertTenantId(tenantId);
  return ledger.store.ledger.list(tenantId, {
    statuses: UNKNOWN_STATUSES,
    limit: Math.min(Math.max(options.limit ?? 50, 1), 500),
    ...(options.after === undefined ? {} : { after: options.after }),
  });
}
