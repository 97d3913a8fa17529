import { randomBytes } from 'node:crypto';
import {
  REASON_MAX,
  operatorReason,
  reconcileHookOf,
  reconcileRecord,
  type Ledger,
  type ResolveRequest,
} from '../calls/index.js';
import { OncelyError } from '../errors/index.js';
import {
  assertTenantId,
  isUnknownStatus,
  parseKey,
  type LedgerEvent,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import type { Tool } from '../tools/index.js';
import { resumeIfReady } from './resume.js';
import { resolveCall } from './runtime-operator.js';

/*
 * An operator's actions on several calls, or on a call's hook: settling calls checked together with
 * one reason (each still its own compare-and-set), and asking a call's reconcile hook now instead of
 * waiting for the sweep.
 */

/** At most this many calls are settled together. */
export const TOGETHER_MAX = 100;

export interface ResolveTogetherRequest extends Omit<ResolveRequest, 'idempotencyKey' | 'together'> {
  readonly keys: readonly string[];
}

/** A call that was not settled: it had moved on (settled by someone else, in flight) or is not there. */
export interface MovedOn {
  readonly idempotencyKey: string;
  readonly code: string;
  readonly message: string;
  readonly record: ToolExecutionRecord | null;
}

export interface ResolvedTogether {
  readonly together: string;
  readonly settled: ToolExecutionRecord[];
  readonly movedOn: MovedOn[];
}

/** Why one call of a batch is passed over rather than failing the batch. */
const PASSED_OVER = new Set(['LEDGER_ALREADY_SETTLED', 'CALL_IN_FLIGHT', 'LEDGER_RECORD_NOT_FOUND']);

/**
 * Settles calls an operator checked together, with one status and one reason. Each call is its own
 * compare-and-set (`resolveToolCall`), recorded in its own history with the batch's id and size; a
 * call that moved on meanwhile (settled by someone else, its attempt still in flight, not found) is
 * listed with why and left as it stands. The keys are checked before anything is written.
 *
 * @example
 * await resolveTogether(ledger, { tenantId: 'acme', keys: ['run_1:call_a', 'run_2:call_b'],
 *   status: 'failed', reason: 'the partner confirmed no payment arrived during the outage', actorId: 'ops-ana' });
 */
export async function resolveTogether(
  ledger: Ledger,
  request: ResolveTogetherRequest,
): Promise<ResolvedTogether> {
  assertTenantId(request.tenantId);
  const keys = [...new Set(request.keys)];
  if (keys.length === 0 || keys.length > TOGETHER_MAX) {
    throw new OncelyError(
      'LEDGER_BATCH_INVALID',
      `settle 1-${TOGETHER_MAX} calls together (got ${keys.length}); split a longer list`,
    );
  }
  for (const key of keys) parseKey(key);
  operatorReason(request.reason, `a reason is required (1-${REASON_MAX} characters): say what you checked`);
  const together = { id: `together_${randomBytes(6).toString('hex')}`, size: keys.length };
  const settled: ToolExecutionRecord[] = [];
  const movedOn: MovedOn[] = [];
  for (const idempotencyKey of keys) {
    try {
      settled.push(await resolveCall(ledger, { ...request, idempotencyKey, together }));
    } catch (error) {
      const passed = PASSED_OVER.has((error as { code?: string }).code ?? '');
      if (!passed || !(error instanceof OncelyError)) throw error;
      const details = error.details as { record?: ToolExecutionRecord } | undefined;
      movedOn.push({
        idempotencyKey,
        code: error.code,
        message: error.message,
        record: details?.record ?? null,
      });
    }
  }
  return { together: together.id, settled, movedOn };
}

export interface HookAsked {
  /** The call as it stands after the hook's answer was recorded. */
  readonly record: ToolExecutionRecord;
  /** What the hook said, as its history recorded it (a transition or a note). */
  readonly said: LedgerEvent | null;
}

/**
 * Asks an unknown call's reconcile hook once, now, and records what it says, as the reconcile sweep
 * would (the decision table decides: `completed` settles it, `failed` settles it once its attempt can
 * no longer land, anything else is a note). Who asked is noted first. A run paused on the call goes
 * back to the queue once it is settled. Refused (`LEDGER_NOT_RECONCILABLE`) for a call whose tool
 * this server does not know or has no hook, and for a compensation record; a settled call answers
 * `LEDGER_ALREADY_SETTLED`.
 */
export async function askHookNow(
  ledger: Ledger,
  tools: ReadonlyMap<string, Tool>,
  request: { readonly tenantId: string; readonly idempotencyKey: string; readonly actorId: string },
): Promise<HookAsked> {
  assertTenantId(request.tenantId);
  parseKey(request.idempotencyKey);
  const record = await ledger.store.ledger.get(request.tenantId, request.idempotencyKey);
  if (record === undefined) {
    throw new OncelyError(
      'LEDGER_RECORD_NOT_FOUND',
      `no tool call ${request.idempotencyKey} in this tenant's ledger`,
      {
        details: { key: request.idempotencyKey },
      },
    );
  }
  if (!isUnknownStatus(record.status)) {
    throw new OncelyError(
      'LEDGER_ALREADY_SETTLED',
      `tool call ${record.idempotencyKey} is already ${record.status}; a reconcile hook is asked only about unknown calls, and nothing was changed`,
      { details: { record } },
    );
  }
  const tool = record.compensationOf === null ? tools.get(record.toolName) : undefined;
  const hook = tool === undefined ? undefined : reconcileHookOf(tool);
  if (tool === undefined || hook === undefined) throw notReconcilable(record, tool);
  await ledger.store.ledger.note({
    tenantId: record.tenantId,
    idempotencyKey: record.idempotencyKey,
    actor: { kind: 'operator', id: request.actorId },
    reason: 'asked the reconcile hook now',
    detail: { askHook: true },
  });
  const before = (await ledger.store.ledger.history(record.tenantId, record.idempotencyKey)).length;
  const now = await reconcileRecord(ledger, tool, hook, record);
  await resumeIfReady(ledger, now.tenantId, now.runId);
  const after = await ledger.store.ledger.history(record.tenantId, record.idempotencyKey);
  const said = after.slice(before).find((e) => e.actor.kind === 'reconcile') ?? null;
  return { record: now, said };
}

function notReconcilable(record: ToolExecutionRecord, tool: Tool | undefined): OncelyError {
  const why =
    record.compensationOf !== null
      ? `it is the compensation of ${record.compensationOf}, and its tool's hook looks for the effect, not its undoing`
      : tool === undefined
        ? `its tool "${record.toolName}" is not known to this server (serve with the configuration whose tools module exports it)`
        : `its tool "${record.toolName}" has no reconcile hook`;
  return new OncelyError(
    'LEDGER_NOT_RECONCILABLE',
    `the reconcile hook of ${record.idempotencyKey} cannot be asked: ${why}; settle it with ` +
      `\`oncely executions resolve ${record.idempotencyKey} --status completed|failed --reason ...\``,
    { details: { key: record.idempotencyKey, record } },
  );
}
