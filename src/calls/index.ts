export { Ledger, openLedger, type LedgerLog, type LedgerOptions } from './ledger.js';
export { executeToolCall, executeToolCalls, type CallOptions } from './execute-tool-call.js';
export type { CallIdentity, ToolCallRequest } from './prepare.js';
export { outcomeOfRecord, type ToolCallOutcome } from './outcome.js';
export { resolveToolCall, type ResolveRequest } from './resolve.js';
export { compensateToolCall, type CompensateRequest, type CompensationOutcome } from './compensate.js';
export { getToolCall, listUnknownCalls, unknownCallCursor } from './queries.js';
// For the run loop, which reserves under its lease and records a step's outcomes in one transaction.
export {
  proceedCall,
  executedOutcome,
  recordWave,
  afterWrite,
  executedTransition,
  recordPlanOf,
  type Reserve,
} from './execute-tool-call.js';
export type { CallProgress } from './call-progress.js';
export { prepareCall, assertBatch, type PreparedCall } from './prepare.js';
export { inToolSlots } from './tool-slots.js';
export { ringToolSlots } from './slot-bell.js';
export { outcomeTransition, recordOutcome, reported } from './record-outcome.js';
export { assertActorId, operatorReason, REASON_MAX } from './operator-input.js';
export { reconcileHookOf, reconcileRecord, reportLoss, stillRunning } from './settlement.js';
export { approvalOf, decideToolApproval, type ApprovalDecision } from './approvals.js';
export {
  findRepeats,
  recheckWindowed,
  windowedCall,
  RepeatRaced,
  type FoundRepeat,
  type Repeats,
  type RepeatLookup,
  type WindowedCall,
} from './repeats.js';
