export {
  RUN_STATUSES,
  FINAL_RUN_STATUSES,
  WAITING_RUN_STATUSES,
  CHECKPOINT_STATUSES,
  APPROVAL_STATUSES,
  isFinalRunStatus,
  type RunStatus,
  type CheckpointStatus,
  type ApprovalStatus,
} from './statuses.js';
export { HEARD_KINDS, type HeardKind } from './records.js';
export type {
  HeardResult,
  PendingCall,
  Checkpoint,
  RunRecord,
  RunSummary,
  RunEvent,
  ApprovalRecord,
  RunUsage,
  RunTurn,
} from './records.js';
export { ZERO_USAGE, addUsage } from './usage.js';
