import { OncelyError } from '../errors/index.js';
import { assertTenantId, isValidId } from '../ledger/index.js';
import type { RunRecord, RunSummary, RunTurn } from '../run-state/index.js';
import type { Store, TenantUsage, UsageFilter } from '../store/index.js';
import { uiMessages, type UiMessage } from './conversation.js';

/*
 * What the runtime reads of runs for its callers; `Runtime` documents each (`getRun`, `getRunSummary`,
 * `turns`, `uiMessages`, `usage`).
 */

export async function findRun(store: Store, tenantId: string, runId: string): Promise<RunRecord> {
  assertTenantId(tenantId);
  const run = isValidId(runId) ? await store.runs.get(tenantId, runId) : undefined;
  return run ?? runNotFound(runId);
}

export async function findRunSummary(store: Store, tenantId: string, runId: string): Promise<RunSummary> {
  assertTenantId(tenantId);
  const run = isValidId(runId) ? await store.runs.summary(tenantId, runId) : undefined;
  return run ?? runNotFound(runId);
}

export async function runTurns(store: Store, tenantId: string, runId: string): Promise<RunTurn[]> {
  await findRunSummary(store, tenantId, runId);
  return store.runs.turns(tenantId, runId);
}

export async function runUiMessages(store: Store, tenantId: string, runId: string): Promise<UiMessage[]> {
  const run = await findRun(store, tenantId, runId);
  return uiMessages(run.runId, run.checkpoint.messages);
}

export async function tenantUsage(store: Store, tenantId: string, filter: UsageFilter): Promise<TenantUsage> {
  assertTenantId(tenantId);
  return store.runs.usage(tenantId, filter);
}

export function runNotFound(runId: string): never {
  throw new OncelyError('RUN_NOT_FOUND', `no run ${runId} in this tenant`, { details: { runId } });
}
