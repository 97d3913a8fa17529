import type { ErrorInfo, ToolExecutionRecord } from '../ledger/index.js';

/**
 * What a guarded call came to. `unknown` is an answer of its own: the effect may or may not have
 * happened, and the call will not run again until a reconcile hook or an operator settles it.
 */
export type ToolCallOutcome =
  | {
      readonly status: 'completed';
      readonly value: unknown;
      readonly resultReference: string | null;
      /** `executed` now; `ledger`: replayed from the record, the tool not called; `reconcile`: found downstream. */
      readonly source: 'executed' | 'ledger' | 'reconcile';
      readonly replayed: boolean;
      readonly record: ToolExecutionRecord;
    }
  | { readonly status: 'failed'; readonly error: ErrorInfo; readonly record: ToolExecutionRecord }
  | {
      readonly status: 'unknown';
      readonly record: ToolExecutionRecord;
      /**
       * Set when nothing was run or settled because the last attempt may still land: why, and when
       * it can no longer land by its age (null while its tool, in this process, has not answered).
       */
      readonly waiting?: { readonly why: string; readonly retryAt: string | null };
    }
  | { readonly status: 'compensated'; readonly record: ToolExecutionRecord };

/** The outcome a record stands for, for a caller that did not run the tool itself. */
export function outcomeOfRecord(
  record: ToolExecutionRecord,
  source: 'ledger' | 'reconcile' = 'ledger',
): ToolCallOutcome {
  switch (record.status) {
    case 'completed':
      return {
        status: 'completed',
        value: record.result,
        resultReference: record.resultReference,
        source,
        replayed: source === 'ledger',
        record,
      };
    case 'failed':
      return {
        status: 'failed',
        error: record.error ?? { code: 'FAILED', message: 'did not take effect' },
        record,
      };
    case 'compensated':
      return { status: 'compensated', record };
    case 'started':
    case 'indeterminate':
      return { status: 'unknown', record };
  }
}
