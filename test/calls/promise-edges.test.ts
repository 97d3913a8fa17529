import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  Ledger,
  compensateToolCall,
  decideToolApproval,
  executeToolCall,
  resolveToolCall,
  type CallIdentity,
  type LedgerLog,
} from '../../src/calls/index.js';
import { isOncelyError } from '../../src/errors/index.js';
import type { LedgerEvent } from '../../src/ledger/index.js';
import type { Store } from '../../src/store/index.js';
import { defineTool, external, type ReconcileHook, type ToolContext } from '../../src/tools/index.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * The promise at its edges, at the level of the guarded call: a key is never run again while an
 * earlier attempt of it may still land; a hook that never answers or answers garbage cannot wedge
 * or crash a caller; an operator cannot settle a call or a compensation that is still running
 * without forcing it; a contradiction is loud; an approval tool needs an approval here too.
 */

const TENANT = 'acme';
const ARGS = { phone: '+15550100', text: 'your code is 1234' };
const Sms = z.object({ phone: z.string(), text: z.string() });

/** A downstream that cannot take a key: every request that reaches it is one more SMS. */
class SmsGateway {
  readonly sent: string[] = [];
  send(reference: string): void {
    this.sent.push(reference);
  }
  count(reference: string): number {
    return this.sent.filter((r) => r === reference).length;
  }
}

interface Gate {
  open(): void;
  readonly opened: Promise<void>;
}

function gate(): Gate {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

const summary = (history: readonly LedgerEvent[]): string[] =>
  history.map((e) => `${e.kind}:${e.via ?? '-'}:${e.from ?? '-'}->${e.to ?? '-'}`);

async function codeOf(work: () => Promise<unknown>): Promise<string> {
  try {
    await work();
  } catch (error) {
    return isOncelyError(error) ? error.code : `not an OncelyError: ${String(error)}`;
  }
  return '(no error)';
}

/** Collects what the ledger logs at error level. */
function capturingLog(): LedgerLog & { lines: { fields: Record<string, unknown>; message: string }[] } {
  const lines: { fields: Record<string, unknown>; message: string }[] = [];
  return { lines, error: (fields, message) => lines.push({ fields, message }) };
}

describe.each(STORE_KINDS)('the promise at its edges, guarded calls on %s', (kind) => {
  let opened: OpenedStore;
  let store: Store;
  let seq = 0;
  const ledgers: Ledger[] = [];

  beforeAll(async () => {
    opened = await openTestStore(kind, 'promise_edges');
    store = opened.store;
  });
  afterAll(async () => {
    await Promise.all(ledgers.map((l) => l.drain({ timeoutMs: 2_000 })));
    await opened.cleanup();
  });

  const ledgerWith = (options: ConstructorParameters<typeof Ledger>[1] = {}): Ledger => {
    const ledger = new Ledger(store, { actorId: `edges-${ledgers.length + 1}`, ...options });
    ledgers.push(ledger);
    return ledger;
  };
  const newCall = (): CallIdentity => ({
    tenantId: TENANT,
    runId: `run_edge_${++seq}`,
    toolCallId: 'call_1',
  });
  const keyOf = (call: CallIdentity): string => `${call.runId}:${call.toolCallId}`;
  const historyOf = async (call: CallIdentity): Promise<string[]> =>
    summary(await store.ledger.history(TENANT, keyOf(call)));

  /** An SMS tool: its request is held at the gateway until `held` opens, and ignores its signal. */
  function smsTool(
    gateway: SmsGateway,
    options: { held?: Gate; reconcile?: ReconcileHook; timeoutMs?: number },
  ) {
    return defineTool({
      name: 'send_sms',
      description: 'Send an SMS',
      input: Sms,
      effect: external(),
      timeoutMs: options.timeoutMs ?? 60,
      downstreamAcceptsKey: false,
      reconcile:
        options.reconcile ??
        ((record) =>
          gateway.count(record.idempotencyKey) > 0
            ? { status: 'completed', value: { sent: true } }
            : { status: 'failed', reason: 'the gateway has no SMS with this reference' }),
      async execute(_args, ctx: ToolContext) {
        if (options.held !== undefined) await options.held.opened; // on the wire, not listening
        gateway.send(ctx.idempotencyKey);
        return { sent: true };
      },
    });
  }

  it('never runs a key again while its first attempt is still in flight here, though the hook says failed (an unkeyed SMS is sent once)', async () => {
    const ledger = ledgerWith({ landingMarginMs: 0 });
    const gateway = new SmsGateway();
    const held = gate();
    const sms = smsTool(gateway, { held });
    const call = newCall();
    const key = keyOf(call);

    const first = await executeToolCall(ledger, sms, ARGS, call);
    expect(first.status).toBe('unknown');
    await sleep(100); // past its timeout: only the attempt still running here says it may land
    const second = await executeToolCall(ledger, sms, ARGS, call);
    expect(second).toMatchObject({
      status: 'unknown',
      record: { status: 'indeterminate', attempt: 1 },
      waiting: { retryAt: null },
    });
    expect(gateway.sent).toEqual([]);

    held.open(); // attempt 1 reaches the gateway after all
    await ledger.drain();
    expect(gateway.count(key)).toBe(1);
    expect(await store.ledger.get(TENANT, key)).toMatchObject({ status: 'completed', attempt: 1 });
    const third = await executeToolCall(ledger, sms, ARGS, call);
    expect(third).toMatchObject({ status: 'completed', source: 'ledger' });
    expect(gateway.count(key)).toBe(1);
    expect(await historyOf(call)).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->indeterminate',
      'note:-:indeterminate->-', // the hook's "failed" while attempt 1 was still out
      'transition:outcome:indeterminate->completed', // attempt 1's late answer: the truth
    ]);
  });

  it("never reconciles or re-runs another process's started attempt that may still land (a frozen process is not gone)", async () => {
    const frozen = ledgerWith({ actorId: 'frozen-worker' });
    const other = ledgerWith({ actorId: 'other-worker' });
    const gateway = new SmsGateway();
    const held = gate();
    let asked = 0;
    const sms = smsTool(gateway, {
      held,
      timeoutMs: 5_000,
      reconcile: () => {
        asked += 1;
        return { status: 'failed', reason: 'nothing at the gateway yet' };
      },
    });
    const call = newCall();
    const key = keyOf(call);
    const inFlight = executeToolCall(frozen, sms, ARGS, call);
    const started = await waitForRecord(store, key);
    expect(started.status).toBe('started');

    const seen = await executeToolCall(other, sms, ARGS, call);
    expect(seen).toMatchObject({ status: 'unknown', record: { status: 'started' } });
    if (seen.status !== 'unknown') throw new Error('unreachable');
    // It may land until its 5 s timeout plus the 5 s margin have passed.
    expect(Date.parse(seen.waiting?.retryAt ?? '')).toBeGreaterThanOrEqual(
      Date.parse(started.attemptStartedAt) + 10_000,
    );
    expect(asked).toBe(0);
    expect(await codeOf(() => resolveToolCall(other, resolveFailed(key)))).toBe('CALL_IN_FLIGHT');

    held.open();
    expect((await inFlight).status).toBe('completed');
    expect(gateway.count(key)).toBe(1);
    expect(await historyOf(call)).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->completed',
    ]);
  });

  it('re-opens a key the hook found failed only once its last attempt can no longer land, and at most 3 attempts of one key', async () => {
    const ledger = ledgerWith({ landingMarginMs: 0 });
    let runs = 0;
    const liar = defineTool({
      name: 'send_sms',
      description: 'Send an SMS',
      input: Sms,
      effect: external(),
      timeoutMs: 30,
      downstreamAcceptsKey: false,
      // Effects keep landing (the gateway counts them), but the hook keeps answering failed.
      reconcile: () => ({ status: 'failed', reason: 'the hook cannot see it' }),
      execute: () => {
        runs += 1;
        throw new Error('connection reset after the request was sent');
      },
    });
    const call = newCall();
    const key = keyOf(call);
    for (let i = 0; i < 6; i++) {
      await executeToolCall(ledger, liar, ARGS, call);
      await sleep(40); // each attempt's timeout passes: it can no longer land
    }
    expect(runs).toBe(3);
    const record = await store.ledger.get(TENANT, key);
    expect(record).toMatchObject({ status: 'indeterminate', attempt: 3 });
    const history = await store.ledger.history(TENANT, key);
    expect(history.filter((e) => e.via === 'reserve').map((e) => e.attempt)).toEqual([1, 2, 3]);
    expect(history.at(-1)).toMatchObject({ kind: 'note', attempt: 3 });
    expect(history.at(-1)?.reason).toMatch(/maximum of attempts; an operator decides/);
  });

  it('moves on from a reconcile hook that never answers: the call stays unknown, noted, within the timeout', async () => {
    const ledger = ledgerWith({ landingMarginMs: 0 });
    const gateway = new SmsGateway();
    const sms = smsTool(gateway, { held: gate(), reconcile: () => new Promise<never>(() => undefined) });
    const call = newCall();
    await executeToolCall(ledger, sms, ARGS, call); // times out
    const startedAt = Date.now();
    const again = await executeToolCall(ledger, sms, ARGS, call);
    expect(Date.now() - startedAt).toBeLessThan(2_000);
    expect(again).toMatchObject({ status: 'unknown', record: { status: 'indeterminate' } });
    const history = await store.ledger.history(TENANT, keyOf(call));
    expect(history.at(-1)).toMatchObject({ kind: 'note' });
    expect(history.at(-1)?.reason).toMatch(/did not answer within 60 ms/);
  });

  it('records a hook answer the ledger cannot store as the hook’s error, never a crash of the caller', async () => {
    const ledger = ledgerWith({ landingMarginMs: 0 });
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const answers: unknown[] = [
      { status: 'completed', value: { amount: 10n } },
      { status: 'completed', value: cyclic },
      { status: 'completed', value: { ok: true }, resultReference: 42 },
      'yes',
    ];
    for (const answer of answers) {
      const sms = smsTool(new SmsGateway(), {
        held: gate(),
        reconcile: (() => answer) as unknown as ReconcileHook,
      });
      const call = newCall();
      await executeToolCall(ledger, sms, ARGS, call);
      const outcome = await executeToolCall(ledger, sms, ARGS, call);
      expect(outcome.status).toBe('unknown');
      const last = (await store.ledger.history(TENANT, keyOf(call))).at(-1);
      expect(last).toMatchObject({ kind: 'note' });
      expect(last?.reason).toMatch(/reconcile hook returned/);
    }
  });

  it('records an error whose message getter throws: the call becomes indeterminate, never left started', async () => {
    const ledger = ledgerWith();
    const hostile = defineTool({
      name: 'send_sms',
      description: 'Send an SMS',
      input: Sms,
      effect: external(),
      execute: () => {
        const error = new Error('x');
        Object.defineProperty(error, 'message', {
          get() {
            throw new Error('no message for you');
          },
        });
        throw error;
      },
    });
    const call = newCall();
    const outcome = await executeToolCall(ledger, hostile, ARGS, call);
    expect(outcome.status).toBe('unknown');
    const record = await store.ledger.get(TENANT, keyOf(call));
    expect(record?.status).toBe('indeterminate');
    expect(record?.error?.message).toMatch(/could not be read: no message for you/);
  });

  it('clears the timeout error of a call its late outcome settled completed', async () => {
    const ledger = ledgerWith();
    const held = gate();
    const sms = smsTool(new SmsGateway(), { held });
    const call = newCall();
    await executeToolCall(ledger, sms, ARGS, call);
    expect((await store.ledger.get(TENANT, keyOf(call)))?.error?.code).toBe('TOOL_TIMEOUT');
    held.open();
    await ledger.drain();
    expect(await store.ledger.get(TENANT, keyOf(call))).toMatchObject({ status: 'completed', error: null });
  });

  it('makes a real outcome that contradicts an operator’s failed loud: a conflict event, a marked record, an error log line', async () => {
    const log = capturingLog();
    const ledger = ledgerWith({ log });
    const held = gate();
    const gateway = new SmsGateway();
    const sms = smsTool(gateway, { held });
    const call = newCall();
    const key = keyOf(call);
    await executeToolCall(ledger, sms, ARGS, call);
    // Settling `failed` while the request may still land needs force (recorded as forced).
    expect(await codeOf(() => resolveToolCall(ledger, resolveFailed(key)))).toBe('CALL_IN_FLIGHT');
    await resolveToolCall(ledger, { ...resolveFailed(key), force: true });
    held.open();
    await ledger.drain();
    expect(gateway.count(key)).toBe(1);
    const record = await store.ledger.get(TENANT, key);
    expect(record).toMatchObject({ status: 'failed', settledBy: { kind: 'operator' } });
    expect(record?.conflictAt).not.toBeNull();
    expect((await historyOf(call)).at(-1)).toBe('conflict:outcome:failed->completed');
    expect(log.lines).toHaveLength(1);
    expect(log.lines[0]?.fields).toMatchObject({
      conflict: true,
      code: 'LEDGER_CONFLICT',
      idempotencyKey: key,
      status: 'failed',
      attempt: 1,
    });
    expect(log.lines[0]?.message).toMatch(/ledger conflict on .*attempt 1 reported it completed/);
    const conflicts = await store.ledger.list(TENANT, { conflict: true, limit: 100 });
    expect(conflicts.map((r) => r.idempotencyKey)).toContain(key);
  });

  it('refuses to settle failed a call that timed out while its request may still land; force is recorded, and after the margin it is plain', async () => {
    const ledger = ledgerWith({ landingMarginMs: 300 });
    const gateway = new SmsGateway();
    // The request answers nothing before the timeout, then lands at the gateway (a slow network).
    const slow = defineTool({
      name: 'send_sms',
      description: 'Send an SMS',
      input: Sms,
      effect: external(),
      timeoutMs: 60,
      downstreamAcceptsKey: false,
      reconcile: () => ({ status: 'unknown' }),
      execute: (_args, ctx: ToolContext) =>
        new Promise(() => {
          setTimeout(() => gateway.send(ctx.idempotencyKey), 200).unref();
        }),
    });
    const call = newCall();
    const key = keyOf(call);
    const first = await executeToolCall(ledger, slow, ARGS, call);
    expect(first).toMatchObject({ status: 'unknown', record: { status: 'indeterminate' } });
    expect(gateway.count(key)).toBe(0); // the operator's look at the gateway finds nothing yet
    expect(await codeOf(() => resolveToolCall(ledger, resolveFailed(key)))).toBe('CALL_IN_FLIGHT');
    await sleep(250);
    expect(gateway.count(key)).toBe(1); // it landed after all
    await sleep(200); // past its timeout plus the margin: it can no longer land
    const settled = await resolveToolCall(ledger, {
      ...resolveFailed(key),
      status: 'completed',
      reason: 'the gateway shows it',
    });
    expect(settled).toMatchObject({ status: 'completed', settledBy: { kind: 'operator' } });

    // Forced, on another call in the same state: allowed, and recorded as forced.
    const other = newCall();
    await executeToolCall(ledger, slow, ARGS, other);
    const forced = await resolveToolCall(ledger, { ...resolveFailed(keyOf(other)), force: true });
    expect(forced.status).toBe('failed');
    const [, , last] = await store.ledger.history(TENANT, keyOf(other));
    expect(last).toMatchObject({ reason: 'forced: no SMS in the gateway log', detail: { forced: true } });
  });

  describe('resolving a call that may still be running', () => {
    it('refuses a started call under a live lease with CALL_IN_FLIGHT, and records a forced one as forced', async () => {
      const ledger = ledgerWith({ landingMarginMs: 0 });
      const call = newCall();
      const key = keyOf(call);
      await store.runs.create({
        tenantId: TENANT,
        runId: call.runId,
        agent: 'sms-agent',
        input: 'go',
        checkpoint: { messages: [], step: 0, pending: null },
      });
      const claimed = await store.runs.claim(TENANT, call.runId, 'live-worker', 60_000);
      expect(claimed?.status).toBe('running');
      const sms = smsTool(new SmsGateway(), {});
      const [reserved] = await store.ledger.reserve(
        [
          {
            tenantId: TENANT,
            idempotencyKey: key,
            runId: call.runId,
            toolCallId: call.toolCallId,
            toolName: sms.name,
            effect: 'external',
            args: ARGS,
            argsDigest: 'digest',
            compensationOf: null,
            attemptTimeoutMs: 0,
          },
        ],
        { kind: 'runtime', id: 'live-worker' },
      );
      expect(reserved?.kind).toBe('reserved');
      const before = await store.ledger.history(TENANT, key);

      let refused: unknown;
      try {
        await resolveToolCall(ledger, resolveFailed(key));
      } catch (error) {
        refused = error;
      }
      expect(refused).toMatchObject({ code: 'CALL_IN_FLIGHT' });
      expect((refused as Error).message).toMatch(/held by a live driver \(live-worker\).*force/);
      expect(await store.ledger.history(TENANT, key)).toEqual(before);

      const forced = await resolveToolCall(ledger, { ...resolveFailed(key), force: true });
      expect(forced).toMatchObject({ status: 'failed', settledBy: { kind: 'operator', id: 'ops-ana' } });
      const last = (await store.ledger.history(TENANT, key)).at(-1);
      expect(last).toMatchObject({
        kind: 'transition',
        via: 'resolve',
        reason: 'forced: no SMS in the gateway log',
        detail: { forced: true },
      });
      expect((last?.detail as { mayStillBeRunning?: string }).mayStillBeRunning).toMatch(/live driver/);
    });

    it('never runs a compensation twice: resolving a running one is refused, a second request answers in progress, and a forced failed does not re-open it while it may land', async () => {
      const ledger = ledgerWith();
      const held = gate();
      let undos = 0;
      const credit = defineTool({
        name: 'issue_credit',
        description: 'Credit an account',
        input: z.object({ accountId: z.string() }),
        effect: external(),
        timeoutMs: 5_000,
        execute: () => ({ credited: true }),
        compensate: async () => {
          undos += 1;
          await held.opened;
          return { voided: true };
        },
      });
      const call = newCall();
      const key = keyOf(call);
      expect((await executeToolCall(ledger, credit, { accountId: 'acct_1' }, call)).status).toBe('completed');
      const request = {
        tenantId: TENANT,
        idempotencyKey: key,
        reason: 'credited by mistake',
        actorId: 'ops-ana',
      };
      const first = compensateToolCall(ledger, credit, request);
      await waitForRecord(store, `${key}:compensation`);

      expect(await codeOf(() => resolveToolCall(ledger, resolveFailed(`${key}:compensation`)))).toBe(
        'CALL_IN_FLIGHT',
      );
      expect((await compensateToolCall(ledger, credit, request)).status).toBe('in_progress');
      await resolveToolCall(ledger, { ...resolveFailed(`${key}:compensation`), force: true });
      // Recorded failed by force, but its hook is still running here: it is not run a second time.
      expect((await compensateToolCall(ledger, credit, request)).status).toBe('in_progress');
      expect(undos).toBe(1);

      held.open();
      const done = await first;
      expect(done.compensation.status).toBe('failed'); // the operator's forced decision stands…
      expect(undos).toBe(1);
      const history = await store.ledger.history(TENANT, `${key}:compensation`);
      expect(history.at(-1)).toMatchObject({ kind: 'conflict', to: 'completed' }); // …and the truth is loud
    });
  });

  describe('an approval tool called directly', () => {
    const refundTool = (runs: string[]) =>
      defineTool({
        name: 'refund',
        description: 'Refund an order',
        input: z.object({ orderId: z.string(), amountCents: z.number().int() }),
        effect: external({ approval: true }),
        execute: (_args, ctx) => {
          runs.push(ctx.idempotencyKey);
          return { refunded: true };
        },
      });

    it('is refused without an approval (APPROVAL_REQUIRED, saying how to get one), asks for it, and runs once approved, once', async () => {
      const ledger = ledgerWith();
      const runs: string[] = [];
      const refund = refundTool(runs);
      const call = newCall();
      const key = keyOf(call);
      const args = { orderId: 'ord_1', amountCents: 5000 };

      let refused: unknown;
      try {
        await executeToolCall(ledger, refund, args, call);
      } catch (error) {
        refused = error;
      }
      expect(refused).toMatchObject({ code: 'APPROVAL_REQUIRED' });
      expect((refused as Error).message).toContain(`oncely approvals approve ${key}`);
      expect(await store.ledger.get(TENANT, key)).toBeUndefined();
      expect(await store.runs.getApproval(TENANT, key)).toMatchObject({
        status: 'pending',
        toolName: 'refund',
      });
      expect(await codeOf(() => executeToolCall(ledger, refund, args, call))).toBe('APPROVAL_REQUIRED');
      expect(runs).toEqual([]);

      await decideToolApproval(ledger, 'approved', {
        tenantId: TENANT,
        idempotencyKey: key,
        actorId: 'ops-ana',
      });
      expect(await codeOf(() => executeToolCall(ledger, refund, { ...args, amountCents: 9999 }, call))).toBe(
        'APPROVAL_REJECTED',
      );
      expect(await executeToolCall(ledger, refund, args, call)).toMatchObject({
        status: 'completed',
        source: 'executed',
      });
      expect(await executeToolCall(ledger, refund, args, call)).toMatchObject({
        status: 'completed',
        source: 'ledger',
      });
      expect(runs).toEqual([key]);
      expect(await store.runs.getApproval(TENANT, key)).toMatchObject({ status: 'consumed' });
    });

    it('is never run once rejected (APPROVAL_REJECTED, with the reason)', async () => {
      const ledger = ledgerWith();
      const runs: string[] = [];
      const refund = refundTool(runs);
      const call = newCall();
      const key = keyOf(call);
      const args = { orderId: 'ord_2', amountCents: 100 };
      expect(await codeOf(() => executeToolCall(ledger, refund, args, call))).toBe('APPROVAL_REQUIRED');
      await decideToolApproval(ledger, 'rejected', {
        tenantId: TENANT,
        idempotencyKey: key,
        actorId: 'ops-ana',
        reason: 'over the refund limit',
      });
      let refused: unknown;
      try {
        await executeToolCall(ledger, refund, args, call);
      } catch (error) {
        refused = error;
      }
      expect(refused).toMatchObject({ code: 'APPROVAL_REJECTED' });
      expect((refused as Error).message).toMatch(/over the refund limit/);
      expect(runs).toEqual([]);
      expect(await store.ledger.get(TENANT, key)).toBeUndefined();
    });
  });

  it('starts no attempt for a caller that has already given up (a driver whose lease is lost): nothing is sent', async () => {
    const ledger = ledgerWith();
    const gateway = new SmsGateway();
    const sms = smsTool(gateway, {});
    const call = newCall();
    const gaveUp = new AbortController();
    gaveUp.abort(new Error('lost the lease'));
    const outcome = await executeToolCall(ledger, sms, ARGS, call, { signal: gaveUp.signal });
    expect(outcome).toMatchObject({ status: 'failed', error: { code: 'TOOL_NOT_ATTEMPTED' } });
    expect(gateway.sent).toEqual([]);
  });
});

function resolveFailed(key: string) {
  return {
    tenantId: TENANT,
    idempotencyKey: key,
    status: 'failed' as const,
    reason: 'no SMS in the gateway log',
    actorId: 'ops-ana',
  };
}

async function waitForRecord(store: Store, key: string) {
  for (let i = 0; i < 200; i++) {
    const record = await store.ledger.get(TENANT, key);
    if (record !== undefined) return record;
    await sleep(10);
  }
  throw new Error(`no record ${key} within 2 s`);
}
