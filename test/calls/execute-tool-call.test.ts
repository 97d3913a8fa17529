import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  Ledger,
  compensateToolCall,
  executeToolCall,
  executeToolCalls,
  getToolCall,
  resolveToolCall,
  type CallIdentity,
  type ToolCallOutcome,
} from '../../src/calls/index.js';
import { ToolNotAttemptedError, isOncelyError } from '../../src/errors/index.js';
import type { LedgerEvent, ToolExecutionRecord } from '../../src/ledger/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import {
  defineTool,
  external,
  read,
  write,
  type CompensateHook,
  type ReconcileHook,
  type Tool,
  type ToolContext,
} from '../../src/tools/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';

type Opened = { store: Store; cleanup(): Promise<void> };

const STORES: [string, () => Promise<Opened>][] = [
  [
    'sqlite',
    async () => {
      const file = tempSqlitePath('calls');
      const store = await openStore(`sqlite:${file.path}`, { migrate: true });
      return {
        store,
        async cleanup() {
          await store.close();
          file.cleanup();
        },
      };
    },
  ],
  [
    'postgres',
    async () => {
      const db = await createTestDatabase('calls');
      const store = await openStore(db.url, { migrate: true });
      return {
        store,
        async cleanup() {
          await store.close();
          await db.drop();
        },
      };
    },
  ],
];

const TENANT = 'acme';
const CreditArgs = z.object({ accountId: z.string(), amountCents: z.number().int().positive() });
const ARGS = { accountId: 'acct_1', amountCents: 2500 };

interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** Rejects when the signal aborts: a tool that stops when told to. */
function untilAborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) =>
    signal.addEventListener('abort', () => reject(new Error('aborted by the signal')), { once: true }),
  );
}

interface Counted {
  tool: Tool;
  /** Every execution that really ran: the downstream effect count. */
  runs: ToolContext[];
  compensations: ToolContext[];
}

function credit(
  options: {
    name?: string;
    effect?: Tool['effect'];
    timeoutMs?: number;
    reconcile?: ReconcileHook;
    compensate?: CompensateHook;
    execute?: (ctx: ToolContext, run: number) => unknown;
  } = {},
): Counted {
  const runs: ToolContext[] = [];
  const compensations: ToolContext[] = [];
  const { compensate } = options;
  const tool = defineTool({
    name: options.name ?? 'issue_credit',
    description: "Credit a customer's account",
    input: CreditArgs,
    effect: options.effect ?? external(),
    timeoutMs: options.timeoutMs ?? 2_000,
    ...(options.reconcile === undefined ? {} : { reconcile: options.reconcile }),
    ...(compensate === undefined
      ? {}
      : {
          compensate: (record: ToolExecutionRecord, ctx: ToolContext) => {
            compensations.push(ctx);
            return compensate(record, ctx);
          },
        }),
    resultReference: (value: unknown) => (value as { receipt?: string } | null)?.receipt ?? null,
    execute: (args, ctx) => {
      runs.push(ctx);
      if (options.execute !== undefined) return options.execute(ctx, runs.length);
      return { receipt: `rcpt_${ctx.idempotencyKey}`, amountCents: args.amountCents };
    },
  });
  return { tool, runs, compensations };
}

/** `kind:via:from->to` for each event: a history that reads at a glance. */
function summary(history: readonly LedgerEvent[]): string[] {
  return history.map((e) => `${e.kind}:${e.via ?? '-'}:${e.from ?? '-'}->${e.to ?? '-'}`);
}

async function codeOf(work: () => Promise<unknown>): Promise<string> {
  try {
    await work();
  } catch (error) {
    return isOncelyError(error) ? error.code : `not an OncelyError: ${String(error)}`;
  }
  return '(no error)';
}

describe.each(STORES)('the guarded call on %s', (_name, open) => {
  let opened: Opened;
  let ledger: Ledger;
  let seq = 0;

  beforeAll(async () => {
    opened = await open();
    // No landing margin: an attempt that has answered (or timed out and stopped) can no longer land
    // once its timeout has passed. test/calls/promise-edges.test.ts covers the margin.
    ledger = new Ledger(opened.store, { actorId: 'test-worker', landingMarginMs: 0 });
  });
  afterAll(async () => {
    await ledger.drain();
    await opened.cleanup();
  });

  const newCall = (tenantId = TENANT): CallIdentity => ({
    tenantId,
    runId: `run_${++seq}`,
    toolCallId: 'call_1',
  });
  const keyOf = (call: CallIdentity): string => `${call.runId}:${call.toolCallId}`;
  const recordOf = (call: CallIdentity) => ledger.store.ledger.get(call.tenantId, keyOf(call));
  const historyOf = (call: CallIdentity) => ledger.store.ledger.history(call.tenantId, keyOf(call));
  const snapshot = async (call: CallIdentity) => ({
    record: await recordOf(call),
    history: await historyOf(call),
  });

  /** A write whose first execution hangs past its timeout (stopping when its signal aborts). */
  async function timedOut(c: Counted, call: CallIdentity): Promise<ToolCallOutcome> {
    const outcome = await executeToolCall(ledger, c.tool, ARGS, call);
    expect(outcome.status).toBe('unknown');
    expect((await recordOf(call))?.status).toBe('indeterminate');
    return outcome;
  }

  const hangOnce = (ctx: ToolContext, run: number): unknown =>
    run === 1 ? untilAborted(ctx.signal) : { receipt: `rcpt_${ctx.idempotencyKey}_${ctx.attempt}` };

  describe('executeToolCall', () => {
    it('runs a new call once and replays a completed one from the ledger', async () => {
      const c = credit();
      const call = newCall();
      const first = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(first).toMatchObject({
        status: 'completed',
        source: 'executed',
        replayed: false,
        value: { receipt: `rcpt_${keyOf(call)}`, amountCents: 2500 },
        resultReference: `rcpt_${keyOf(call)}`,
      });
      expect(c.runs.map((ctx) => [ctx.idempotencyKey, ctx.attempt, ctx.retry])).toEqual([
        [keyOf(call), 1, 0],
      ]);
      const after = await snapshot(call);
      expect(after.record).toMatchObject({
        status: 'completed',
        attempt: 1,
        version: 2,
        result: { amountCents: 2500 },
      });
      expect(summary(after.history)).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->completed',
      ]);

      const again = await executeToolCall(ledger, c.tool, { amountCents: 2500, accountId: 'acct_1' }, call);
      expect(again).toMatchObject({
        status: 'completed',
        source: 'ledger',
        replayed: true,
        value: first.status === 'completed' ? first.value : null,
      });
      expect(c.runs).toHaveLength(1);
      expect(await snapshot(call)).toEqual(after);
    });

    it('refuses a replay of a key with different arguments or another tool, writing nothing', async () => {
      const c = credit();
      const call = newCall();
      await executeToolCall(ledger, c.tool, ARGS, call);
      const before = await snapshot(call);
      expect(await codeOf(() => executeToolCall(ledger, c.tool, { ...ARGS, amountCents: 9999 }, call))).toBe(
        'LEDGER_ARGS_MISMATCH',
      );
      const other = credit({ name: 'send_refund' });
      expect(await codeOf(() => executeToolCall(ledger, other.tool, ARGS, call))).toBe(
        'LEDGER_ARGS_MISMATCH',
      );
      expect(c.runs).toHaveLength(1);
      expect(other.runs).toHaveLength(0);
      expect(await snapshot(call)).toEqual(before);
    });

    it('refuses a bad argument set with TOOL_ARGS_INVALID and writes nothing', async () => {
      const c = credit();
      const tenantId = `args_${seq}`;
      for (const args of [
        { accountId: 'a', amountCents: -5 },
        { accountId: 'a' },
        null,
        { accountId: 'a', amountCents: 1.5 },
      ]) {
        const call = newCall(tenantId);
        expect(await codeOf(() => executeToolCall(ledger, c.tool, args, call))).toBe('TOOL_ARGS_INVALID');
        expect(await snapshot(call)).toEqual({ record: undefined, history: [] });
      }
      expect(await ledger.store.ledger.list(tenantId, { limit: 10 })).toEqual([]);
      expect(c.runs).toHaveLength(0);
    });

    it('refuses bad tenant, run and tool call ids and writes nothing', async () => {
      const c = credit();
      for (const tenantId of ['', 'acme corp', 'a:b', 'x'.repeat(129)]) {
        expect(
          await codeOf(() =>
            executeToolCall(ledger, c.tool, ARGS, { tenantId, runId: 'run_ok', toolCallId: 'call_1' }),
          ),
        ).toBe('LEDGER_TENANT_INVALID');
        expect(await ledger.store.ledger.list(tenantId, { limit: 10 })).toEqual([]);
      }
      const tenantId = `ids_${seq}`;
      for (const [runId, toolCallId] of [
        ['run:1', 'call_1'],
        ['run_1', ''],
        ['run_1', 'call 1'],
        ['', 'call_1'],
      ] as const) {
        expect(
          await codeOf(() => executeToolCall(ledger, c.tool, ARGS, { tenantId, runId, toolCallId })),
        ).toBe('LEDGER_KEY_INVALID');
      }
      expect(await ledger.store.ledger.list(tenantId, { limit: 10 })).toEqual([]);
      expect(c.runs).toHaveLength(0);
    });

    it('records ToolNotAttemptedError as failed, then runs the same key again as attempt 2', async () => {
      const c = credit({
        execute: (ctx, run) => {
          if (run === 1) throw new ToolNotAttemptedError('the billing token expired');
          return { receipt: `rcpt_${ctx.idempotencyKey}_${ctx.attempt}` };
        },
      });
      const call = newCall();
      const first = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(first).toMatchObject({
        status: 'failed',
        error: { code: 'TOOL_NOT_ATTEMPTED', message: 'the billing token expired' },
      });
      expect(await recordOf(call)).toMatchObject({
        status: 'failed',
        attempt: 1,
        error: { code: 'TOOL_NOT_ATTEMPTED' },
      });

      const second = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(second).toMatchObject({
        status: 'completed',
        source: 'executed',
        value: { receipt: `rcpt_${keyOf(call)}_2` },
      });
      expect(c.runs.map((ctx) => [ctx.idempotencyKey, ctx.attempt])).toEqual([
        [keyOf(call), 1],
        [keyOf(call), 2],
      ]);
      expect(await recordOf(call)).toMatchObject({ status: 'completed', attempt: 2, error: null });
      expect(summary(await historyOf(call))).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->failed',
        'transition:reserve:failed->started',
        'transition:outcome:started->completed',
      ]);
    });

    it('records a write that times out as unknown, aborts its signal, and never runs that key again by itself', async () => {
      const c = credit({ timeoutMs: 50, execute: (ctx) => untilAborted(ctx.signal) });
      const call = newCall();
      const outcome = await timedOut(c, call);
      expect(outcome.record).toMatchObject({ status: 'indeterminate', error: { code: 'TOOL_TIMEOUT' } });
      expect(c.runs).toHaveLength(1);
      expect(c.runs[0]?.signal.aborted).toBe(true);
      const after = await snapshot(call);
      expect(summary(after.history)).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->indeterminate',
      ]);

      const again = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(again.status).toBe('unknown');
      expect(c.runs).toHaveLength(1);
      await ledger.drain();
      expect(await snapshot(call)).toEqual(after);
    });

    it('records a write that throws an unexpected error as unknown, not failed', async () => {
      const c = credit({
        execute: () => {
          throw new Error('connection reset');
        },
      });
      const call = newCall();
      const outcome = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(outcome.status).toBe('unknown');
      expect(await recordOf(call)).toMatchObject({
        status: 'indeterminate',
        error: { message: 'connection reset' },
      });
    });

    it('settles an unknown call by the reconcile hook: completed carries on without running the tool', async () => {
      const seen: ToolExecutionRecord[] = [];
      const c = credit({
        timeoutMs: 50,
        execute: (ctx) => untilAborted(ctx.signal),
        reconcile: (record) => {
          seen.push(record);
          return {
            status: 'completed',
            value: { receipt: 'found_downstream' },
            resultReference: 'found_downstream',
          };
        },
      });
      const call = newCall();
      await timedOut(c, call);
      const outcome = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(outcome).toMatchObject({
        status: 'completed',
        source: 'reconcile',
        value: { receipt: 'found_downstream' },
        resultReference: 'found_downstream',
      });
      expect(c.runs).toHaveLength(1);
      expect(seen.map((r) => [r.idempotencyKey, r.status])).toEqual([[keyOf(call), 'indeterminate']]);
      expect(await recordOf(call)).toMatchObject({
        status: 'completed',
        result: { receipt: 'found_downstream' },
        settledBy: { kind: 'reconcile', id: 'hook:issue_credit' },
      });
      expect(summary(await historyOf(call))).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->indeterminate',
        'transition:reconcile:indeterminate->completed',
      ]);
      // Settled: a later call replays it without asking the hook again.
      expect(await executeToolCall(ledger, c.tool, ARGS, call)).toMatchObject({
        status: 'completed',
        source: 'ledger',
      });
      expect(seen).toHaveLength(1);
    });

    it('re-runs a call the reconcile hook found failed, with the same key as attempt 2, once its attempt can no longer land', async () => {
      const c = credit({
        timeoutMs: 50,
        execute: hangOnce,
        reconcile: () => ({ status: 'failed', reason: 'no such credit' }),
      });
      const call = newCall();
      await timedOut(c, call);
      const record = await recordOf(call);
      await sleep(Math.max(0, Date.parse(record!.attemptStartedAt) + 60 - Date.now()));
      const outcome = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(outcome).toMatchObject({
        status: 'completed',
        source: 'executed',
        value: { receipt: `rcpt_${keyOf(call)}_2` },
      });
      expect(c.runs.map((ctx) => [ctx.idempotencyKey, ctx.attempt])).toEqual([
        [keyOf(call), 1],
        [keyOf(call), 2],
      ]);
      expect(await recordOf(call)).toMatchObject({ status: 'completed', attempt: 2 });
      expect(summary(await historyOf(call))).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->indeterminate',
        'transition:reconcile:indeterminate->failed',
        'transition:reserve:failed->started',
        'transition:outcome:started->completed',
      ]);
    });

    it('notes a reconcile hook that cannot tell and leaves the call indeterminate', async () => {
      const c = credit({
        timeoutMs: 50,
        execute: hangOnce,
        reconcile: () => ({ status: 'unknown', reason: 'billing is down' }),
      });
      const call = newCall();
      await timedOut(c, call);
      const outcome = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(outcome.status).toBe('unknown');
      expect(c.runs).toHaveLength(1);
      const { record, history } = await snapshot(call);
      expect(record).toMatchObject({ status: 'indeterminate', version: 2 });
      expect(summary(history)).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->indeterminate',
        'note:-:indeterminate->-',
      ]);
      expect(history.at(-1)).toMatchObject({
        reason: 'billing is down',
        actor: { kind: 'reconcile', id: 'hook:issue_credit' },
      });
    });

    it('retries a read that throws twice, then completes on the third try', async () => {
      const c = credit({
        name: 'lookup_account',
        effect: read({ baseDelayMs: 1, maxDelayMs: 2 }),
        execute: (ctx, run) => {
          if (run < 3) throw new Error(`flaky ${run}`);
          return { balance: 100, retry: ctx.retry };
        },
      });
      const call = newCall();
      const outcome = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(outcome).toMatchObject({
        status: 'completed',
        source: 'executed',
        value: { balance: 100, retry: 2 },
      });
      expect(c.runs.map((ctx) => [ctx.attempt, ctx.retry, ctx.idempotencyKey])).toEqual([
        [1, 0, keyOf(call)],
        [1, 1, keyOf(call)],
        [1, 2, keyOf(call)],
      ]);
      expect(await recordOf(call)).toMatchObject({ status: 'completed', attempt: 1, effect: 'read' });
      expect(summary(await historyOf(call))).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->completed',
      ]);
    });

    it('records a read that always fails as failed after its tries', async () => {
      const c = credit({
        name: 'lookup_account',
        effect: read({ baseDelayMs: 1, maxDelayMs: 2 }),
        execute: () => {
          throw new Error('lookup is down');
        },
      });
      const call = newCall();
      const outcome = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(outcome).toMatchObject({ status: 'failed', error: { code: 'TOOL_EXECUTION_FAILED' } });
      expect(c.runs.map((ctx) => ctx.retry)).toEqual([0, 1, 2]);
      expect(await recordOf(call)).toMatchObject({
        status: 'failed',
        error: { code: 'TOOL_EXECUTION_FAILED' },
      });
      expect(summary(await historyOf(call))).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->failed',
      ]);
    });

    it('never records a read as indeterminate, even when every try times out', async () => {
      const c = credit({
        name: 'lookup_account',
        effect: read({ attempts: 2, baseDelayMs: 1, maxDelayMs: 2 }),
        timeoutMs: 50,
        execute: (ctx) => untilAborted(ctx.signal),
      });
      const call = newCall();
      const outcome = await executeToolCall(ledger, c.tool, ARGS, call);
      expect(outcome.status).toBe('failed');
      expect(c.runs).toHaveLength(2);
      expect(c.runs.every((ctx) => ctx.signal.aborted)).toBe(true);
      await ledger.drain();
      const history = await historyOf(call);
      expect(summary(history)).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->failed',
      ]);
      expect(history.some((e) => e.to === 'indeterminate')).toBe(false);
    });

    it('gives up waiting for a late outcome after drain({ timeoutMs }), leaving the call unknown', async () => {
      const gate = deferred<unknown>();
      const c = credit({ timeoutMs: 50, execute: () => gate.promise });
      const call = newCall();
      try {
        await timedOut(c, call);
        expect(await ledger.drain({ timeoutMs: 30 })).toBe(false);
        expect((await snapshot(call)).record?.status).toBe('indeterminate');
      } finally {
        gate.resolve({ receipt: 'late_receipt' });
      }
      expect(await ledger.drain({ timeoutMs: 5_000 })).toBe(true);
      expect((await snapshot(call)).record?.status).toBe('completed');
    });

    it('lets the late outcome of a timed-out write settle the indeterminate record', async () => {
      const gate = deferred<unknown>();
      const c = credit({ timeoutMs: 50, execute: () => gate.promise });
      const call = newCall();
      try {
        await timedOut(c, call);
      } finally {
        gate.resolve({ receipt: 'late_receipt' });
      }
      await ledger.drain();
      const { record, history } = await snapshot(call);
      expect(record).toMatchObject({
        status: 'completed',
        result: { receipt: 'late_receipt' },
        resultReference: 'late_receipt',
        settledBy: { kind: 'runtime', id: 'test-worker' },
      });
      expect(summary(history)).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->indeterminate',
        'transition:outcome:indeterminate->completed',
      ]);
      expect(history.at(-1)?.reason).toMatch(/late outcome/);
      expect(c.runs).toHaveLength(1);
      expect(await executeToolCall(ledger, c.tool, ARGS, call)).toMatchObject({
        status: 'completed',
        source: 'ledger',
      });
    });

    it("records a late outcome after an operator's decision as ignored; the decision stands", async () => {
      const gate = deferred<unknown>();
      const c = credit({ timeoutMs: 50, execute: () => gate.promise });
      const call = newCall();
      try {
        await timedOut(c, call);
        // Its request may still land: settling it failed now takes force.
        await resolveToolCall(ledger, {
          tenantId: call.tenantId,
          idempotencyKey: keyOf(call),
          status: 'failed',
          reason: 'no credit in the billing console',
          actorId: 'ops-ana',
          force: true,
        });
      } finally {
        gate.resolve({ receipt: 'late_receipt' });
      }
      await ledger.drain();
      const { record, history } = await snapshot(call);
      expect(record).toMatchObject({
        status: 'failed',
        result: null,
        settledBy: { kind: 'operator', id: 'ops-ana' },
      });
      expect(summary(history)).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->indeterminate',
        'transition:resolve:indeterminate->failed',
        'conflict:outcome:failed->completed',
      ]);
      // The effect landed on a call settled failed: loud, never a quiet `ignored`.
      expect(record?.conflictAt).not.toBeNull();
      expect(history.at(-1)).toMatchObject({ attempt: 1, detail: { result: { receipt: 'late_receipt' } } });
    });
  });

  describe('resolveToolCall', () => {
    async function unknownCall(): Promise<CallIdentity> {
      const call = newCall();
      await timedOut(credit({ timeoutMs: 50, execute: (ctx) => untilAborted(ctx.signal) }), call);
      return call;
    }

    it('settles an unknown call, recording the operator and the reason', async () => {
      const call = await unknownCall();
      const record = await resolveToolCall(ledger, {
        tenantId: call.tenantId,
        idempotencyKey: keyOf(call),
        status: 'completed',
        reason: 'credit found in the billing console',
        actorId: 'ops-ana',
        result: { receipt: 'manual' },
        resultReference: 'manual',
      });
      expect(record).toMatchObject({
        status: 'completed',
        result: { receipt: 'manual' },
        settledBy: { kind: 'operator', id: 'ops-ana' },
      });
      expect((await historyOf(call)).at(-1)).toMatchObject({
        kind: 'transition',
        via: 'resolve',
        to: 'completed',
        reason: 'credit found in the billing console',
        actor: { kind: 'operator', id: 'ops-ana' },
      });
      expect(
        await codeOf(() =>
          resolveToolCall(ledger, {
            tenantId: call.tenantId,
            idempotencyKey: keyOf(call),
            status: 'failed',
            reason: 'x',
            actorId: 'ops-bo',
          }),
        ),
      ).toBe('LEDGER_ALREADY_SETTLED');
    });

    it('requires a reason and an actor id, changing nothing without them', async () => {
      const call = await unknownCall();
      const before = await snapshot(call);
      const base = { tenantId: call.tenantId, idempotencyKey: keyOf(call), status: 'completed' as const };
      for (const reason of ['', '   ', undefined]) {
        expect(
          await codeOf(() =>
            resolveToolCall(ledger, { ...base, reason: reason as string, actorId: 'ops-ana' }),
          ),
        ).toBe('LEDGER_REASON_REQUIRED');
      }
      for (const actorId of ['', 'ops ana', undefined]) {
        expect(
          await codeOf(() =>
            resolveToolCall(ledger, { ...base, reason: 'checked', actorId: actorId as string }),
          ),
        ).toBe('LEDGER_ACTOR_INVALID');
      }
      expect(await snapshot(call)).toEqual(before);
    });

    it('lets exactly one of 20 concurrent resolves win', async () => {
      const call = await unknownCall();
      const results = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) =>
          resolveToolCall(ledger, {
            tenantId: call.tenantId,
            idempotencyKey: keyOf(call),
            status: i % 2 === 0 ? 'completed' : 'failed',
            reason: `operator ${i} checked`,
            actorId: `ops-${i}`,
          }),
        ),
      );
      const won = results.filter((r) => r.status === 'fulfilled');
      const lost = results.filter((r) => r.status === 'rejected');
      expect(won).toHaveLength(1);
      expect(lost).toHaveLength(19);
      expect(lost.every((r) => isOncelyError(r.reason, 'LEDGER_ALREADY_SETTLED'))).toBe(true);
      const winner = won[0]!.value;
      const { record, history } = await snapshot(call);
      expect(record).toEqual(winner);
      const resolves = history.filter((e) => e.via === 'resolve');
      expect(resolves).toHaveLength(1);
      expect(resolves[0]).toMatchObject({ kind: 'transition', actor: winner.settledBy, to: winner.status });
      expect(history).toHaveLength(3);
    });

    it('answers a missing key with LEDGER_RECORD_NOT_FOUND', async () => {
      const call = newCall();
      expect(
        await codeOf(() =>
          resolveToolCall(ledger, {
            tenantId: call.tenantId,
            idempotencyKey: keyOf(call),
            status: 'failed',
            reason: 'checked',
            actorId: 'ops-ana',
          }),
        ),
      ).toBe('LEDGER_RECORD_NOT_FOUND');
      expect(await snapshot(call)).toEqual({ record: undefined, history: [] });
    });

    it("does not show or settle another tenant's call", async () => {
      const call = await unknownCall();
      const before = await snapshot(call);
      expect(await getToolCall(ledger, 'globex', keyOf(call))).toBeUndefined();
      expect(
        await codeOf(() =>
          resolveToolCall(ledger, {
            tenantId: 'globex',
            idempotencyKey: keyOf(call),
            status: 'failed',
            reason: 'checked',
            actorId: 'ops-ana',
          }),
        ),
      ).toBe('LEDGER_RECORD_NOT_FOUND');
      expect(await snapshot(call)).toEqual(before);
    });
  });

  describe('compensateToolCall', () => {
    const request = (call: CallIdentity) => ({
      tenantId: call.tenantId,
      idempotencyKey: keyOf(call),
      reason: 'credited by mistake',
      actorId: 'ops-ana',
    });

    it('runs the hook once under <key>:compensation and marks the call compensated', async () => {
      const c = credit({
        compensate: (record, ctx) => ({ reversed: record.resultReference, key: ctx.idempotencyKey }),
      });
      const call = newCall();
      await executeToolCall(ledger, c.tool, ARGS, call);
      const outcome = await compensateToolCall(ledger, c.tool, request(call));
      expect(outcome.status).toBe('compensated');
      expect(c.compensations.map((ctx) => [ctx.idempotencyKey, ctx.attempt])).toEqual([
        [`${keyOf(call)}:compensation`, 1],
      ]);
      expect(outcome.record).toMatchObject({
        status: 'compensated',
        result: { receipt: `rcpt_${keyOf(call)}` },
      });
      expect(outcome.compensation).toMatchObject({
        idempotencyKey: `${keyOf(call)}:compensation`,
        status: 'completed',
        compensationOf: keyOf(call),
        toolName: 'issue_credit',
        result: { reversed: `rcpt_${keyOf(call)}`, key: `${keyOf(call)}:compensation` },
      });
      expect(await ledger.store.ledger.get(call.tenantId, `${keyOf(call)}:compensation`)).toEqual(
        outcome.compensation,
      );
      expect(await recordOf(call)).toEqual(outcome.record);
      const history = await historyOf(call);
      expect(summary(history)).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->completed',
        'transition:compensate:completed->compensated',
      ]);
      expect(history.at(-1)?.actor).toEqual({ kind: 'operator', id: 'ops-ana' });
      // Asking again answers from the ledger; the hook does not run twice, nor does the call.
      expect((await compensateToolCall(ledger, c.tool, request(call))).status).toBe('compensated');
      expect(c.compensations).toHaveLength(1);
      expect(await executeToolCall(ledger, c.tool, ARGS, call)).toMatchObject({ status: 'compensated' });
      expect(c.runs).toHaveLength(1);
    });

    it('runs the hook exactly once for two concurrent compensations', async () => {
      const entered = deferred<void>();
      const release = deferred<void>();
      const c = credit({
        compensate: async () => {
          entered.resolve();
          await release.promise;
          return { reversed: true };
        },
      });
      const call = newCall();
      await executeToolCall(ledger, c.tool, ARGS, call);
      const both = Promise.all([
        compensateToolCall(ledger, c.tool, request(call)),
        compensateToolCall(ledger, c.tool, request(call)),
      ]);
      await entered.promise;
      // Asked again while the hook runs: told it is in progress, not run a second time.
      const meanwhile = await compensateToolCall(ledger, c.tool, request(call));
      expect(meanwhile.status).toBe('in_progress');
      expect(meanwhile.compensation.status).toBe('started');
      release.resolve();
      const outcomes = await both;
      expect(c.compensations).toHaveLength(1);
      expect(outcomes.map((o) => o.status)).toContain('compensated');
      expect(outcomes.every((o) => o.status === 'compensated' || o.status === 'in_progress')).toBe(true);
      expect(await recordOf(call)).toMatchObject({ status: 'compensated' });
      const compensationHistory = await ledger.store.ledger.history(
        call.tenantId,
        `${keyOf(call)}:compensation`,
      );
      expect(summary(compensationHistory)).toEqual([
        'transition:reserve:-->started',
        'transition:outcome:started->completed',
      ]);
    });

    it('refuses to compensate a call that is not completed, or a tool without a hook', async () => {
      const withHook = credit({
        timeoutMs: 50,
        execute: (ctx) => untilAborted(ctx.signal),
        compensate: () => ({ ok: true }),
      });
      const unknown = newCall();
      await timedOut(withHook, unknown);
      expect(await codeOf(() => compensateToolCall(ledger, withHook.tool, request(unknown)))).toBe(
        'LEDGER_NOT_COMPENSABLE',
      );

      const refusing = credit({
        execute: () => {
          throw new ToolNotAttemptedError('locked');
        },
        compensate: () => ({ ok: true }),
      });
      const failed = newCall();
      await executeToolCall(ledger, refusing.tool, ARGS, failed);
      expect(await codeOf(() => compensateToolCall(ledger, refusing.tool, request(failed)))).toBe(
        'LEDGER_NOT_COMPENSABLE',
      );

      const noHook = credit();
      const done = newCall();
      await executeToolCall(ledger, noHook.tool, ARGS, done);
      const before = await snapshot(done);
      expect(await codeOf(() => compensateToolCall(ledger, noHook.tool, request(done)))).toBe(
        'LEDGER_NOT_COMPENSABLE',
      );
      expect(await snapshot(done)).toEqual(before);

      for (const call of [unknown, failed, done]) {
        expect(await ledger.store.ledger.get(call.tenantId, `${keyOf(call)}:compensation`)).toBeUndefined();
      }
      expect([...withHook.compensations, ...refusing.compensations]).toHaveLength(0);
      expect(await codeOf(() => compensateToolCall(ledger, noHook.tool, request(newCall())))).toBe(
        'LEDGER_RECORD_NOT_FOUND',
      );
    });

    it('leaves a timed-out compensation unknown; resolving it completed marks the call compensated', async () => {
      const c = credit({ timeoutMs: 50, compensate: (_record, ctx) => untilAborted(ctx.signal) });
      const call = newCall();
      await executeToolCall(ledger, c.tool, ARGS, call);
      const outcome = await compensateToolCall(ledger, c.tool, request(call));
      expect(outcome.status).toBe('unknown');
      expect(outcome.compensation).toMatchObject({
        status: 'indeterminate',
        error: { code: 'TOOL_TIMEOUT' },
      });
      expect(c.compensations[0]?.signal.aborted).toBe(true);
      expect(await recordOf(call)).toMatchObject({ status: 'completed' });

      const compensationKey = `${keyOf(call)}:compensation`;
      const resolved = await resolveToolCall(ledger, {
        tenantId: call.tenantId,
        idempotencyKey: compensationKey,
        status: 'completed',
        reason: 'reversal found in billing',
        actorId: 'ops-bo',
      });
      expect(resolved).toMatchObject({ status: 'completed', settledBy: { kind: 'operator', id: 'ops-bo' } });
      expect(await recordOf(call)).toMatchObject({ status: 'compensated' });
      expect((await historyOf(call)).at(-1)).toMatchObject({
        via: 'compensate',
        from: 'completed',
        to: 'compensated',
        actor: { kind: 'operator', id: 'ops-bo' },
      });
      expect(c.compensations).toHaveLength(1);
    });
  });

  describe('executeToolCalls', () => {
    it('reserves the calls of one response in one go and answers in order', async () => {
      const a = credit();
      const b = credit({ name: 'lookup_account', effect: read() });
      const c = credit({ name: 'set_owner', effect: write() });
      const runId = `run_${++seq}`;
      const call = (toolCallId: string): CallIdentity => ({ tenantId: TENANT, runId, toolCallId });
      // call_2 already completed earlier: it replays from the ledger inside the batch.
      await executeToolCall(ledger, b.tool, { accountId: 'acct_b', amountCents: 2 }, call('call_2'));
      const reserve = vi.spyOn(ledger.store.ledger, 'reserve');
      let outcomes: ToolCallOutcome[];
      try {
        outcomes = await executeToolCalls(ledger, [
          { ...call('call_1'), tool: a.tool, args: { accountId: 'acct_a', amountCents: 1 } },
          { ...call('call_2'), tool: b.tool, args: { accountId: 'acct_b', amountCents: 2 } },
          { ...call('call_3'), tool: c.tool, args: { accountId: 'acct_c', amountCents: 3 } },
        ]);
        expect(reserve).toHaveBeenCalledTimes(1);
        expect(reserve.mock.calls[0]?.[0].map((r) => r.idempotencyKey)).toEqual([
          `${runId}:call_1`,
          `${runId}:call_2`,
          `${runId}:call_3`,
        ]);
      } finally {
        reserve.mockRestore();
      }
      expect(
        outcomes.map((o) => [
          o.status,
          o.status === 'completed' ? o.source : null,
          o.record.idempotencyKey,
          o.record.toolName,
        ]),
      ).toEqual([
        ['completed', 'executed', `${runId}:call_1`, 'issue_credit'],
        ['completed', 'ledger', `${runId}:call_2`, 'lookup_account'],
        ['completed', 'executed', `${runId}:call_3`, 'set_owner'],
      ]);
      expect(
        outcomes.map((o) =>
          o.status === 'completed' ? (o.value as { amountCents: number }).amountCents : null,
        ),
      ).toEqual([1, 2, 3]);
      expect([a.runs.length, b.runs.length, c.runs.length]).toEqual([1, 1, 1]);
      expect((await ledger.store.ledger.list(TENANT, { limit: 10, runId })).map((r) => r.status)).toEqual([
        'completed',
        'completed',
        'completed',
      ]);
    });

    it('records every outcome of a batch in one write: two commits whatever its size', async () => {
      const a = credit();
      const runId = `run_${++seq}`;
      const calls = Array.from({ length: 6 }, (_, i) => ({
        tenantId: TENANT,
        runId,
        toolCallId: `call_${i}`,
        tool: a.tool,
        args: { accountId: `acct_${i}`, amountCents: i + 1 },
      }));
      const store = ledger.store;
      const reserve = vi.spyOn(store.ledger, 'reserve');
      const transitions = vi.spyOn(store.ledger, 'transitions');
      const transition = vi.spyOn(store.ledger, 'transition');
      const transaction = vi.spyOn(store, 'transaction');
      try {
        const outcomes = await executeToolCalls(ledger, calls);
        expect(outcomes.map((o) => o.status)).toEqual(Array(6).fill('completed'));
        // One reservation statement and one write of the six outcomes; no outcome on its own.
        expect(reserve).toHaveBeenCalledTimes(1);
        expect(transitions).toHaveBeenCalledTimes(1);
        expect(transitions.mock.calls[0]?.[0]).toHaveLength(6);
        expect(transition).toHaveBeenCalledTimes(0);
        expect(transaction).toHaveBeenCalledTimes(0);
      } finally {
        reserve.mockRestore();
        transitions.mockRestore();
        transition.mockRestore();
        transaction.mockRestore();
      }
      expect(a.runs).toHaveLength(6);
      const records = await store.ledger.list(TENANT, { limit: 10, runId });
      expect(records.map((r) => [r.status, r.version])).toEqual(Array(6).fill(['completed', 2]));
      for (const r of records) {
        expect(summary(await store.ledger.history(TENANT, r.idempotencyKey))).toEqual([
          'transition:reserve:-->started',
          'transition:outcome:started->completed',
        ]);
      }
    });

    it('refuses a batch with a repeated tool call id or a bad call, writing nothing', async () => {
      const a = credit();
      const runId = `run_${++seq}`;
      const one = { tenantId: TENANT, runId, toolCallId: 'call_1', tool: a.tool, args: ARGS };
      expect(await codeOf(() => executeToolCalls(ledger, [one, one]))).toBe('LEDGER_BATCH_INVALID');
      expect(
        await codeOf(() => executeToolCalls(ledger, [one, { ...one, toolCallId: 'call_2', args: {} }])),
      ).toBe('TOOL_ARGS_INVALID');
      expect(await ledger.store.ledger.list(TENANT, { limit: 10, runId })).toEqual([]);
      expect(a.runs).toHaveLength(0);
    });
  });
});
