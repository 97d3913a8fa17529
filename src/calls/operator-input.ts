import { z } from 'zod';
import { OncelyError } from '../errors/index.js';
import { assertTenantId, isValidId, parseKey, type ParsedKey } from '../ledger/index.js';

const REASON_MAX = 2_000;

/** Validates what an operator sends: tenant, key, actor id and a reason (required, trimmed, bounded). */
export function operatorInput(input: {
  tenantId: unknown;
  idempotencyKey: unknown;
  actorId: unknown;
  reason: unknown;
}): { tenantId: string; key: string; parsed: ParsedKey; actorId: string; reason: string } {
  assertTenantId(input.tenantId);
  const parsed = parseKey(input.idempotencyKey);
  if (!isValidId(input.actorId)) {
    throw new OncelyError(
      'LEDGER_ACTOR_INVALID',
      "an operator action needs the operator's actor id: 1-128 characters of A-Z a-z 0-9 _ . -",
    );
  }
  const reason = z.string().trim().min(1).max(REASON_MAX).safeParse(input.reason);
  if (!reason.success) {
    throw new OncelyError(
      'LEDGER_REASON_REQUIRED',
      `a reason is required (1-${REASON_MAX} characters): say what you checked and what you found`,
    );
  }
  return {
    tenantId: input.tenantId,
    key: input.idempotencyKey as string,
    parsed,
    actorId: input.actorId,
    reason: reason.data,
  };
}
