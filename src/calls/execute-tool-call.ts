import { OncelyError } from '../errors/index.js';
import { crashPoint } from '../crash/index.js';
import {
  argsDigest,
  assertCallIds,
  assertTenantId,
  idempotencyKey,
  toJsonValue,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import type { ReserveRequest, ReserveResult } from '../store/index.js';
import { assertTool, parseToolArgs, type Tool } from '../tools/index.js';
import { runAttempts } from './attempt.js';
import type { Ledger } from './ledger.js';
import { outcomeOfRecord, type ToolCallOutcome } from './outcome.js';
import { reconcileHookOf, reconcileRecord } from './reconcile.js';
import { recordOutcome } from './record-outcome.js';

export interface CallIdentity {
  readonly runId: string;
  readonly toolCallId: string;
  readonly tenantId: string;
}

export interface CallOptions {
  /** Aborting it aborts the tool's signal; a write in flight then becomes unknown, never failed. */
  readonly signal?: AbortSignal;
  /**
   * Ask the reconcile hook about a `started` call too, not only an `indeterminate` one. Set it only
   * when you know the process that reserved it is gone (a run's recovery does), or the hook may look
   * while the call is still in flight.
   */
  readonly reconcileStarted?: boolean;
}

export interface ToolCallRequest extends CallIdentity {
  readonly tool: Tool;
  readonly args: unknown;
}

interface PreparedCall {
  readonly tool: Tool;
  readonly args: unknown;
  readonly request: ReserveRequest;
}

/** Times a call may go round reserve → reconcile `failed` → reserve again before we stop. */
const MAX_ROUNDS = 3;

/**
 * Runs one tool call once: reserves its key in the ledger, then runs the tool only if the ledger says
 * so. A completed key returns its recorded result without calling the tool; an unknown key is asked
 * of the reconcile hook (if any) and otherwise reported unknown; a failed key runs again, same key.
 *
 * @example
 * const outcome = await executeToolCall(ledger, issueCredit, { accountId: 'acct_1', amountCents: 2500 },
 *   { runId: 'run_1', toolCallId: 'call_1', tenantId: 'acme' });
 * if (outcome.status === 'unknown') console.log('settle it:', outcome.record.idempotencyKey);
 */
export async function executeToolCall(
  ledger: Ledger,
  tool: Tool,
  args: unknown,
  call: CallIdentity,
  options: CallOptions = {},
): Promise<ToolCallOutcome> {
  const [outcome] = await executeToolCalls(ledger, [{ ...call, tool, args }], options);
  if (outcome === undefined) throw new Error('executeToolCalls returned no outcome for one call');
  return outcome;
}

/**
 * Runs the calls of one model response: all are validated first (a bad one writes nothing), reserved
 * together in one statement, then run in parallel as the ledger allows. Outcomes come back in order.
 */
export async function executeToolCalls(
  ledger: Ledger,
  calls: readonly ToolCallRequest[],
  options: CallOptions = {},
): Promise<ToolCallOutcome[]> {
  const prepared = calls.map(prepare);
  assertBatch(prepared);
  if (prepared.length === 0) return [];
  const reservations = await ledger.store.ledger.reserve(
    prepared.map((p) => p.request),
    ledger.actor,
  );
  return Promise.all(prepared.map((call, i) => proceed(ledger, call, reservations[i], options, 1)));
}

function prepare(call: ToolCallRequest): PreparedCall {
  assertTool(call.tool);
  assertTenantId(call.tenantId);
  assertCallIds(call.runId, call.toolCallId);
  const args = parseToolArgs(call.tool, call.args);
  const stored = toJsonValue(args);
  return {
    tool: call.tool,
    args,
    request: {
      tenantId: call.tenantId,
      idempotencyKey: idempotencyKey(call.runId, call.toolCallId),
      runId: call.runId,
      toolCallId: call.toolCallId,
      toolName: call.tool.name,
      effect: call.tool.effect.kind,
      args: stored,
      argsDigest: argsDigest(stored),
      compensationOf: null,
    },
  };
}

function assertBatch(prepared: readonly PreparedCall[]): void {
  const tenants = new Set(prepared.map((p) => p.request.tenantId));
  const keys = new Set(prepared.map((p) => p.request.idempotencyKey));
  if (tenants.size > 1 || keys.size !== prepared.length) {
    throw new OncelyError(
      'LEDGER_BATCH_INVALID',
      'the calls of one batch must share one tenant and have distinct tool call ids',
    );
  }
}

async function proceed(
  ledger: Ledger,
  call: PreparedCall,
  reservation: ReserveResult | undefined,
  options: CallOptions,
  round: number,
): Promise<ToolCallOutcome> {
  if (reservation === undefined)
    throw new Error(`no reservation came back for ${call.request.idempotencyKey}`);
  if (reservation.kind === 'reserved') return run(ledger, call, reservation.record, options);
  const record = reservation.record;
  assertSameCall(call, record);
  if (record.status !== 'started' && record.status !== 'indeterminate') return outcomeOfRecord(record);
  const hook = reconcileHookOf(call.tool);
  const mayAsk = record.status === 'indeterminate' || options.reconcileStarted === true;
  if (hook === undefined || !mayAsk || round > MAX_ROUNDS) return outcomeOfRecord(record);
  const settled = await reconcileRecord(ledger, call.tool, hook, record, options.signal);
  if (settled.status === 'completed') return outcomeOfRecord(settled, 'reconcile');
  if (settled.status !== 'failed') return outcomeOfRecord(settled);
  // Definitely not taken effect: eligible to run again, with the same key.
  const [again] = await ledger.store.ledger.reserve([call.request], ledger.actor);
  return proceed(ledger, call, again, options, round + 1);
}

function assertSameCall(call: PreparedCall, record: ToolExecutionRecord): void {
  if (record.argsDigest === call.request.argsDigest && record.toolName === call.request.toolName) return;
  const what =
    record.toolName !== call.request.toolName ? `tool "${record.toolName}"` : 'different arguments';
  throw new OncelyError(
    'LEDGER_ARGS_MISMATCH',
    `tool call ${record.idempotencyKey} was first made with ${what}; a key is bound to one call, so this ` +
      `replay was refused and nothing ran. Mint a new tool call id for a new call.`,
    {
      details: {
        key: record.idempotencyKey,
        recordedTool: record.toolName,
        recordedDigest: record.argsDigest,
        attemptedTool: call.request.toolName,
        attemptedDigest: call.request.argsDigest,
      },
    },
  );
}

async function run(
  ledger: Ledger,
  call: PreparedCall,
  record: ToolExecutionRecord,
  options: CallOptions,
): Promise<ToolCallOutcome> {
  await crashPoint('tool.after-reserve');
  const { tool } = call;
  const outcome = await runAttempts({
    effect: tool.effect,
    timeoutMs: tool.timeoutMs,
    signal: options.signal,
    context: {
      idempotencyKey: record.idempotencyKey,
      runId: record.runId,
      toolCallId: record.toolCallId,
      tenantId: record.tenantId,
      attempt: record.attempt,
    },
    run: async (context) => {
      await crashPoint('tool.before-execute');
      return tool.execute(call.args, context);
    },
  });
  if (outcome.kind === 'completed') await crashPoint('tool.after-effect');
  const written = await recordOutcome(
    { ledger, record, resultReference: (v) => tool.resultReference?.(v) },
    outcome,
  );
  await crashPoint('tool.after-record');
  if (
    outcome.kind === 'completed' &&
    written.status === 'completed' &&
    written.version === record.version + 1
  ) {
    return {
      status: 'completed',
      value: outcome.value,
      resultReference: written.resultReference,
      source: 'executed',
      replayed: false,
      record: written,
    };
  }
  return outcomeOfRecord(written);
}
