/** The statuses of a run (DESIGN §6). */
export const RUN_STATUSES = [
  'queued',
  'running',
  'awaiting_approval',
  'awaiting_reconciliation',
  'completed',
  'failed',
  'cancelled',
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

export const FINAL_RUN_STATUSES = [
  'completed',
  'failed',
  'cancelled',
] as const satisfies readonly RunStatus[];
export const WAITING_RUN_STATUSES = [
  'awaiting_approval',
  'awaiting_reconciliation',
] as const satisfies readonly RunStatus[];

export function isFinalRunStatus(status: RunStatus): boolean {
  return (FINAL_RUN_STATUSES as readonly RunStatus[]).includes(status);
}

/** Where a run's driver may leave it when it saves a checkpoint. */
export const CHECKPOINT_STATUSES = [
  'running',
  'awaiting_approval',
  'awaiting_reconciliation',
  'completed',
  'failed',
] as const satisfies readonly RunStatus[];
export type CheckpointStatus = (typeof CHECKPOINT_STATUSES)[number];

export const APPROVAL_STATUSES = ['pending', 'approved', 'rejected', 'consumed'] as const;
export type ApprovalStatus = (typeof APPROVAL_STATUSES)[number];
