/** The statuses of a tool-execution record (DESIGN §4). */
export const LEDGER_STATUSES = ['started', 'completed', 'failed', 'indeterminate', 'compensated'] as const;
export type LedgerStatus = (typeof LEDGER_STATUSES)[number];

/** "Unknown": the effect may or may not have happened, and nobody has settled it yet. */
export const UNKNOWN_STATUSES = ['started', 'indeterminate'] as const satisfies readonly LedgerStatus[];

export function isUnknownStatus(status: LedgerStatus): boolean {
  return (UNKNOWN_STATUSES as readonly LedgerStatus[]).includes(status);
}

export function isLedgerStatus(value: unknown): value is LedgerStatus {
  return typeof value === 'string' && (LEDGER_STATUSES as readonly string[]).includes(value);
}

/** The side effects a tool may declare (DESIGN §3). */
export const EFFECT_KINDS = ['read', 'write', 'external', 'destructive'] as const;
export type EffectKind = (typeof EFFECT_KINDS)[number];
