/**
 * Every error oncely raises carries one of these codes. They are stable: callers, the HTTP API and
 * scripts branch on them, so a code is never renamed or reused for another meaning.
 */
export const ERROR_CODES = [
  'TOOL_DEFINITION_INVALID',
  'TOOL_ARGS_INVALID',
  'TOOL_NOT_ATTEMPTED',
  'TOOL_EXECUTION_FAILED',
  'TOOL_TIMEOUT',
  'TOOL_CONTRACT_VIOLATED',
  'TOOL_RESULT_INVALID',
  'LEDGER_KEY_INVALID',
  'LEDGER_TENANT_INVALID',
  'LEDGER_ARGS_MISMATCH',
  'LEDGER_TRANSITION_REFUSED',
  'LEDGER_ALREADY_SETTLED',
  'LEDGER_RECORD_NOT_FOUND',
  'LEDGER_REASON_REQUIRED',
  'LEDGER_ACTOR_INVALID',
  'LEDGER_NOT_COMPENSABLE',
  'LEDGER_BATCH_INVALID',
  'STORE_URL_INVALID',
  'STORE_UNAVAILABLE',
  'SCHEMA_OUTDATED',
  'SCHEMA_TOO_NEW',
  'SCHEMA_MIGRATION_FAILED',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];
