export { Ledger, openLedger } from './ledger.js';
export {
  executeToolCall,
  executeToolCalls,
  type CallIdentity,
  type CallOptions,
  type ToolCallRequest,
} from './execute-tool-call.js';
export { outcomeOfRecord, type ToolCallOutcome } from './outcome.js';
export { resolveToolCall, type ResolveRequest } from './resolve.js';
export { compensateToolCall, type CompensateRequest, type CompensationOutcome } from './compensate.js';
export { getToolCall, listUnknownCalls } from './queries.js';
