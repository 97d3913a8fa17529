import { decideToolApproval, type ApprovalDecision, type Ledger } from '../calls/index.js';
import type { ApprovalRecord } from '../run-state/index.js';
import { resumeIfReady } from './resume.js';

export type { ApprovalDecision } from '../calls/index.js';

/**
 * Approves or rejects a call of a run waiting for approval (`decideToolApproval`); a run with nothing
 * else to wait for goes back to the queue.
 */
export async function decideApproval(
  ledger: Ledger,
  decision: 'approved' | 'rejected',
  input: ApprovalDecision,
): Promise<ApprovalRecord> {
  const decided = await decideToolApproval(ledger, decision, input);
  await resumeIfReady(ledger, decided.tenantId, decided.runId);
  return decided;
}
