import {
  REASON_MAX,
  assertActorId,
  compensateToolCall,
  operatorReason,
  resolveToolCall,
  type CompensateRequest,
  type CompensationOutcome,
  type Ledger,
  type ResolveRequest,
} from '../calls/index.js';
import { OncelyError } from '../errors/index.js';
import { assertTenantId, parseKey, type ToolExecutionRecord } from '../ledger/index.js';
import type { RunRecord } from '../run-state/index.js';
import type { Store } from '../store/index.js';
import type { Tool } from '../tools/index.js';
import { resumeIfReady } from './resume.js';
import { findRun } from './runtime-queries.js';

/*
 * An operator's actions on runs and calls, each checked and compare-and-set in the store: `Runtime`
 * documents each (`retry`, `cancel`, `resolve`, `compensate`). Approvals are decided in decisions.ts.
 */

export async function retryRun(
  store: Store,
  tenantId: string,
  runId: string,
  request: { reason: string; actorId: string },
): Promise<RunRecord> {
  const run = await findRun(store, tenantId, runId);
  assertActorId(request.actorId, 'a retry');
  const reason = operatorReason(request.reason, `a retry needs a reason (1-${REASON_MAX} characters)`);
  const retried = await store.runs.retry(tenantId, runId, reason, request.actorId);
  if (retried !== undefined) return retried;
  const now = await findRun(store, tenantId, runId);
  throw new OncelyError(
    'RUN_NOT_RETRYABLE',
    `run ${runId} is ${now.status}, not failed; only a failed run can be retried, and nothing was changed`,
    { details: { runId, status: now.status, was: run.status } },
  );
}

export async function cancelRun(
  store: Store,
  tenantId: string,
  runId: string,
  request: { reason: string; actorId: string },
): Promise<RunRecord> {
  const run = await findRun(store, tenantId, runId);
  assertActorId(request.actorId, 'a cancel');
  const reason = operatorReason(request.reason, `a cancel needs a reason (1-${REASON_MAX} characters)`);
  const cancelled = await store.runs.cancel(tenantId, runId, reason, request.actorId);
  if (cancelled !== undefined) return cancelled;
  const now = await findRun(store, tenantId, runId);
  throw new OncelyError('RUN_ALREADY_FINAL', `run ${runId} is already ${now.status}; nothing was changed`, {
    details: { runId, status: now.status, was: run.status },
  });
}

export async function resolveCall(ledger: Ledger, request: ResolveRequest): Promise<ToolExecutionRecord> {
  const record = await resolveToolCall(ledger, request);
  await resumeIfReady(ledger, record.tenantId, record.runId);
  return record;
}

export async function compensateCall(
  ledger: Ledger,
  tools: ReadonlyMap<string, Tool>,
  request: CompensateRequest,
): Promise<CompensationOutcome> {
  assertTenantId(request.tenantId);
  parseKey(request.idempotencyKey);
  const record = await ledger.store.ledger.get(request.tenantId, request.idempotencyKey);
  if (record === undefined) {
    throw new OncelyError(
      'LEDGER_RECORD_NOT_FOUND',
      `no tool call ${request.idempotencyKey} in this tenant's ledger`,
      { details: { key: request.idempotencyKey } },
    );
  }
  const tool = tools.get(record.toolName);
  if (tool === undefined) {
    throw new OncelyError(
      'LEDGER_NOT_COMPENSABLE',
      `tool call ${record.idempotencyKey} was made by tool "${record.toolName}", which this runtime does not ` +
        `know (no agent or tools module given to it has it), so its compensate hook cannot run here; ` +
        `compensate from a server that loads the tools module exporting "${record.toolName}": ` +
        `\`oncely serve -c oncely.yaml\` where that file's \`tools:\` names it (with --no-worker too)`,
      { details: { key: record.idempotencyKey, status: record.status } },
    );
  }
  const outcome = await compensateToolCall(ledger, tool, request);
  await resumeIfReady(ledger, outcome.record.tenantId, outcome.record.runId);
  return outcome;
}
