import { errorInfo } from '../errors/index.js';
import { toJsonValue, type ToolExecutionRecord } from '../ledger/index.js';
import type { ReconcileHook, ReconcileOutcome, Tool } from '../tools/index.js';
import type { Ledger } from './ledger.js';

const RECONCILE_ACTOR = 'hook';

/** A read changed nothing, so a read that was in flight when its process died may simply run again. */
const readHasNoEffect: ReconcileHook = () => ({
  status: 'failed',
  reason: 'a read has no side effect; it is safe to run again',
});

export function reconcileHookOf(tool: Tool): ReconcileHook | undefined {
  return tool.reconcile ?? (tool.effect.kind === 'read' ? readHasNoEffect : undefined);
}

/**
 * Asks the tool's reconcile hook what became of an unknown call and records the answer,
 * compare-and-set: `completed` and `failed` settle it; `unknown` (or a hook that throws) leaves it
 * unknown with a note in the history. Returns the record as it now stands.
 */
export async function reconcileRecord(
  ledger: Ledger,
  tool: Tool,
  hook: ReconcileHook,
  record: ToolExecutionRecord,
  signal?: AbortSignal,
): Promise<ToolExecutionRecord> {
  const outcome = await askHook(hook, record, tool, signal);
  const actor = { kind: 'reconcile' as const, id: `${RECONCILE_ACTOR}:${tool.name}` };
  const where = { tenantId: record.tenantId, idempotencyKey: record.idempotencyKey };
  if (outcome.status === 'unknown') {
    await ledger.store.ledger.note({
      ...where,
      actor,
      reason: outcome.reason ?? 'reconcile hook could not tell',
    });
    return record;
  }
  const expect = { status: record.status, version: record.version };
  const written =
    outcome.status === 'completed'
      ? await ledger.store.ledger.transition({
          ...where,
          via: 'reconcile',
          to: 'completed',
          expect,
          actor,
          reason: 'found downstream by the reconcile hook',
          result: outcome.value === undefined ? null : toJsonValue(outcome.value),
          resultReference: outcome.resultReference ?? null,
          recordIgnored: true,
        })
      : await ledger.store.ledger.transition({
          ...where,
          via: 'reconcile',
          to: 'failed',
          expect,
          actor,
          reason: outcome.reason ?? 'the reconcile hook found that it did not take effect',
          error: { code: 'RECONCILED_NOT_TAKEN', message: outcome.reason ?? 'did not take effect' },
          recordIgnored: true,
        });
  return written.record ?? record;
}

async function askHook(
  hook: ReconcileHook,
  record: ToolExecutionRecord,
  tool: Tool,
  signal?: AbortSignal,
): Promise<ReconcileOutcome> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new Error('reconcile hook timed out')), tool.timeoutMs);
  const onAbort = (): void => controller.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    const outcome = await hook(record, {
      idempotencyKey: record.idempotencyKey,
      runId: record.runId,
      toolCallId: record.toolCallId,
      tenantId: record.tenantId,
      attempt: record.attempt,
      retry: 0,
      signal: controller.signal,
    });
    return validOutcome(outcome);
  } catch (error) {
    return { status: 'unknown', reason: `reconcile hook failed: ${errorInfo(error).message}` };
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
  }
}

function validOutcome(outcome: unknown): ReconcileOutcome {
  const status = (outcome as { status?: unknown } | null)?.status;
  if (status === 'completed' || status === 'failed' || status === 'unknown')
    return outcome as ReconcileOutcome;
  return {
    status: 'unknown',
    reason: `reconcile hook returned ${JSON.stringify(outcome) ?? 'nothing'}, not a status`,
  };
}
