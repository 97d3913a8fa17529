import type { ToolExecutionRecord } from '../ledger/index.js';
import type { AttemptOutcome } from './attempt.js';
import type { ToolCallOutcome } from './outcome.js';
import type { PreparedCall } from './prepare.js';

/**
 * Where a call stands before anything is written for it: settled by the ledger (a replay, a reconcile
 * hook), or executed now with its outcome still to record. Its own module so that what executes a
 * call and what holds its tool slot both read it without importing each other.
 */
export type CallProgress =
  | { readonly kind: 'settled'; readonly outcome: ToolCallOutcome }
  | {
      readonly kind: 'executed';
      readonly call: PreparedCall;
      readonly record: ToolExecutionRecord;
      readonly attempt: AttemptOutcome;
    };
