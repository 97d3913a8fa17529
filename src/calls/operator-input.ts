import { z } from 'zod/v4';
import { OncelyError } from '../errors/index.js';
import { assertTenantId, isValidId, parseKey, type ParsedKey } from '../ledger/index.js';

export const REASON_MAX = 2_000;

const reasonSchema = z.string().trim().min(1).max(REASON_MAX);

/** Refuses an operator action without a valid actor id (`LEDGER_ACTOR_INVALID`). */
export function assertActorId(actorId: unknown, action = 'an operator action'): asserts actorId is string {
  if (isValidId(actorId)) return;
  throw new OncelyError(
    'LEDGER_ACTOR_INVALID',
    `${action} needs the operator's actor id: 1-128 characters of A-Z a-z 0-9 _ . -`,
  );
}

/** An operator's reason, trimmed, 1-2000 characters; else `LEDGER_REASON_REQUIRED` saying `why`. */
export function operatorReason(reason: unknown, why: string): string {
  const parsed = reasonSchema.safeParse(reason);
  if (parsed.success) return parsed.data;
  throw new OncelyError('LEDGER_REASON_REQUIRED', why);
}

/** Validates what an operator sends: tenant, key, actor id and a reason (required, trimmed, bounded). */
export function operatorInput(input: {
  tenantId: unknown;
  idempotencyKey: unknown;
  actorId: unknown;
  reason: unknown;
}): { tenantId: string; key: string; parsed: ParsedKey; actorId: string; reason: string } {
  assertTenantId(input.tenantId);
  const parsed = parseKey(input.idempotencyKey);
  assertActorId(input.actorId);
  const reason = operatorReason(
    input.reason,
    `a reason is required (1-${REASON_MAX} characters): say what you checked and what you found`,
  );
  return {
    tenantId: input.tenantId,
    key: input.idempotencyKey as string,
    parsed,
    actorId: input.actorId,
    reason,
  };
}
