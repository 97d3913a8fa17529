import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { resolveToolCall } from '../../src/calls/index.js';
import type { RunRecord } from '../../src/run-state/index.js';
import type { Runtime } from '../../src/runs/index.js';
import type { Store } from '../../src/store/index.js';
import { defineTool, write, type ReconcileHook, type Tool } from '../../src/tools/index.js';
import {
  OPERATOR,
  Runtimes,
  STORES,
  TENANT,
  callIdsOf,
  keyOf,
  scriptedAgent,
  seedDeadWorkerStep,
  startAndDrive,
  summary,
  toolResultsIn,
  type OpenedStore,
} from './fixtures.js';
import { FakeDownstream, OWNER } from './tools.js';

/*
 * The reconcile sweep asks the hook of every unknown call, whatever its run's status: a run that
 * ended `failed` (its guard's `RUN_RETRIES_EXCEEDED`, or `on_indeterminate: fail`) keeps no unknown
 * call a hook could settle. A hook that cannot tell is asked again only after a growing wait, a pass
 * asks a bounded number of hooks, oldest first, and a retry of the failed run then replays the
 * settled call: the tool is not run again.
 */

let seq = 0;

/** A hook that counts its asks per key and answers what `answer` says. */
function countingHook(answer: ReconcileHook): {
  hook: ReconcileHook;
  asks: Map<string, number>;
} {
  const asks = new Map<string, number>();
  const hook: ReconcileHook = (record, ctx) => {
    asks.set(record.idempotencyKey, (asks.get(record.idempotencyKey) ?? 0) + 1);
    return answer(record, ctx);
  };
  return { hook, asks };
}

/**
 * A write whose answer is lost: the request takes effect downstream, then nothing comes back before
 * its 50 ms timeout, so the call is `indeterminate`. A name of its own per test.
 */
function lostAnswer(
  downstream: FakeDownstream,
  reconcile: ReconcileHook,
): { tool: Tool; executions: string[] } {
  const executions: string[] = [];
  const tool = defineTool({
    name: `change_owner_${++seq}`,
    description: "Change an account's owner",
    input: z.object({ accountId: z.string(), owner: z.string() }),
    effect: write(),
    timeoutMs: 50,
    reconcile,
    execute: async (args, ctx) => {
      executions.push(ctx.idempotencyKey);
      downstream.apply(ctx.idempotencyKey, { ...args });
      await new Promise((_, reject) =>
        ctx.signal.addEventListener('abort', () => reject(new Error('connection reset')), { once: true }),
      );
      return null;
    },
  });
  return { tool, executions };
}

/** Looks the key up downstream once `visible`; until then the hook cannot tell. */
function laggingLookup(downstream: FakeDownstream, visible: { now: boolean }) {
  return countingHook((record) => {
    const found = downstream.find(record.idempotencyKey);
    return visible.now && found !== undefined
      ? { status: 'completed', value: found }
      : { status: 'unknown', reason: 'the CRM replica is behind' };
  });
}

const reconcileEvents = async (store: Store, key: string) =>
  (await store.ledger.history(TENANT, key)).filter((e) => e.actor.kind === 'reconcile');

describe.each(STORES)('the reconcile sweep on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  // A database per test: the sweep reads every tenant's unknown calls, so no test sees another's.
  beforeEach(async () => {
    opened = await open('runs_reconcile_sweep');
    store = opened.store;
  });
  afterEach(async () => {
    await runtimes.closeAll();
    await opened.cleanup();
  });

  /** Runs ended `failed` by `on_indeterminate: fail`, each with one unknown call of `tool`. */
  async function failedRuns(runtime: Runtime, n: number): Promise<{ run: RunRecord; key: string }[]> {
    const failed: { run: RunRecord; key: string }[] = [];
    for (let i = 0; i < n; i++) {
      const run = await startAndDrive(runtime, `Give acct_${i} to dana.`);
      expect(run).toMatchObject({ status: 'failed', error: { code: 'RUN_CALL_UNKNOWN' } });
      failed.push({ run, key: keyOf(run, callIdsOf(run)[0] ?? '') });
    }
    return failed;
  }

  it('settles the unknown call of a run its guard failed (RUN_RETRIES_EXCEEDED) in one pass; a retry replays it, the tool not run again', async () => {
    const downstream = new FakeDownstream();
    const visible = { now: false };
    const lookup = laggingLookup(downstream, visible);
    const owner = lostAnswer(downstream, lookup.hook);
    const { agent, model } = scriptedAgent([{ text: 'unused' }, { text: 'Done.' }], [owner.tool]);
    // A worker ran the call (its answer was lost: indeterminate), then died; its runtime gives up on
    // the run at the next claim, while the downstream replica still lags.
    const guard = runtimes.open(store, [agent], { owner: 'guard', maxDriveAttempts: 1 });
    const seeded = await seedDeadWorkerStep(guard, agent.name, [{ tool: owner.tool, input: OWNER }], {
      execute: true,
    });
    const key = seeded.keys[0] ?? '';
    expect(await guard.recover()).toMatchObject([
      {
        runId: seeded.runId,
        end: { kind: 'ended', status: 'failed', error: { code: 'RUN_RETRIES_EXCEEDED' } },
      },
    ]);
    expect((await store.ledger.get(TENANT, key))?.status).toBe('indeterminate');
    expect(downstream.effectsOf(key)).toBe(1);

    visible.now = true;
    const sweeper = runtimes.open(store, [agent], { owner: 'sweeper' });
    await sweeper.sweep();

    expect(await store.ledger.get(TENANT, key)).toMatchObject({
      status: 'completed',
      result: { receipt: 'rcpt_1', ...OWNER },
      settledBy: { kind: 'reconcile' },
    });
    expect(
      (await reconcileEvents(store, key)).map((e) => `${e.kind}:${e.from ?? '-'}->${e.to ?? '-'}`),
    ).toContain('transition:indeterminate->completed');
    expect((await sweeper.getRun(TENANT, seeded.runId)).status).toBe('failed'); // a final run stays final

    await sweeper.retry(TENANT, seeded.runId, { reason: 'the replica caught up', actorId: OPERATOR });
    const done = await sweeper.drive(TENANT, seeded.runId);

    expect(done.status).toBe('completed');
    expect(toolResultsIn(model.received.at(-1)).map((h) => h.output)).toEqual([
      { type: 'json', value: { status: 'completed', result: { receipt: 'rcpt_1', ...OWNER } } },
    ]);
    expect(owner.executions).toEqual([key]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
  });

  it('settles the unknown call of a run failed by on_indeterminate: fail; a retry replays it', async () => {
    const downstream = new FakeDownstream();
    const visible = { now: false };
    const lookup = laggingLookup(downstream, visible);
    const owner = lostAnswer(downstream, lookup.hook);
    const { agent, model } = scriptedAgent(
      (_prompt, turn) =>
        turn === 0 ? { toolCalls: [{ toolName: owner.tool.name, input: OWNER }] } : { text: 'Done.' },
      [owner.tool],
    );
    const runtime = runtimes.open(store, [agent]);
    const [failed] = await failedRuns(runtime, 1);
    const { run, key } = failed ?? { run: undefined as never, key: '' };

    visible.now = true;
    await runtime.sweep();

    expect(summary(await store.ledger.history(TENANT, key)).at(-1)).toBe(
      'transition:reconcile:indeterminate->completed',
    );
    await runtime.retry(TENANT, run.runId, { reason: 'the replica caught up', actorId: OPERATOR });
    expect((await runtime.drive(TENANT, run.runId)).status).toBe('completed');
    expect(toolResultsIn(model.received.at(-1)).map((h) => h.output)).toEqual([
      { type: 'json', value: { status: 'completed', result: { receipt: 'rcpt_1', ...OWNER } } },
    ]);
    expect(owner.executions).toEqual([key]);
    expect(downstream.effectsOf(key)).toBe(1);
  });

  it('asks a hook that could not tell again only after its wait, which grows', async () => {
    const downstream = new FakeDownstream();
    const lookup = laggingLookup(downstream, { now: false });
    const owner = lostAnswer(downstream, lookup.hook);
    const { agent } = scriptedAgent(
      (_prompt, turn) =>
        turn === 0 ? { toolCalls: [{ toolName: owner.tool.name, input: OWNER }] } : { text: 'Done.' },
      [owner.tool],
    );
    const runtime = runtimes.open(store, [agent], { reconcileEveryMs: 400 });
    const [failed] = await failedRuns(runtime, 1);
    const key = failed?.key ?? '';
    const notes = async () => (await reconcileEvents(store, key)).filter((e) => e.kind === 'note').length;
    const before = await notes(); // the drive asked once, before the run failed

    await runtime.sweep(); // asked at once: nothing waits yet for this call
    expect(await notes()).toBe(before + 1);
    await runtime.sweep(); // within its first wait (400 ms)
    expect(await notes()).toBe(before + 1);
    await sleep(450);
    await runtime.sweep(); // the first wait is over
    expect(await notes()).toBe(before + 2);
    await sleep(450);
    await runtime.sweep(); // within its second wait (800 ms)
    expect(await notes()).toBe(before + 2);
    await sleep(450);
    await runtime.sweep(); // the second wait is over
    expect(await notes()).toBe(before + 3);
    expect(lookup.asks.get(key)).toBe(before + 3);
    expect((await store.ledger.get(TENANT, key))?.status).toBe('indeterminate');
  });

  it('asks at most its bound of hooks per pass, the longest unknown first, and the rest on the next pass', async () => {
    const downstream = new FakeDownstream();
    const lookup = laggingLookup(downstream, { now: false });
    const owner = lostAnswer(downstream, lookup.hook);
    const { agent } = scriptedAgent(
      (_prompt, turn) =>
        turn === 0 ? { toolCalls: [{ toolName: owner.tool.name, input: OWNER }] } : { text: 'Done.' },
      [owner.tool],
    );
    const runtime = runtimes.open(store, [agent], { reconcilePerSweep: 2 });
    const keys = (await failedRuns(runtime, 3)).map((f) => f.key);
    const asked = () => keys.map((k) => lookup.asks.get(k) ?? 0);
    expect(asked()).toEqual([1, 1, 1]); // each drive asked once

    await runtime.sweep();
    expect(asked()).toEqual([2, 2, 1]);
    await runtime.sweep(); // the first two wait now; the third is next
    expect(asked()).toEqual([2, 2, 2]);
    await runtime.sweep(); // every call waits (30 s by default): nothing is asked
    expect(asked()).toEqual([2, 2, 2]);
  });

  it('loses cleanly to an operator who settles the call while its hook is being asked (a contradiction is loud)', async () => {
    const downstream = new FakeDownstream();
    const target: { runtime?: Runtime } = {};
    let racing = false;
    const lookup = countingHook(async (record) => {
      if (racing && target.runtime !== undefined) {
        await resolveToolCall(target.runtime.ledger, {
          tenantId: TENANT,
          idempotencyKey: record.idempotencyKey,
          status: 'failed',
          reason: 'not in the CRM',
          actorId: OPERATOR,
        });
        return { status: 'completed', value: { owner: 'dana' } };
      }
      return { status: 'unknown', reason: 'the CRM replica is behind' };
    });
    const owner = lostAnswer(downstream, lookup.hook);
    const { agent } = scriptedAgent(
      (_prompt, turn) =>
        turn === 0 ? { toolCalls: [{ toolName: owner.tool.name, input: OWNER }] } : { text: 'Done.' },
      [owner.tool],
    );
    const runtime = runtimes.open(store, [agent]);
    target.runtime = runtime;
    const [failed] = await failedRuns(runtime, 1);
    const key = failed?.key ?? '';

    racing = true;
    await runtime.sweep();

    expect(await store.ledger.get(TENANT, key)).toMatchObject({
      status: 'failed',
      settledBy: { kind: 'operator', id: OPERATOR },
    });
    const history = await store.ledger.history(TENANT, key);
    expect(summary(history).slice(-2)).toEqual([
      'transition:resolve:indeterminate->failed',
      // The hook's answer came second: recorded, and loud, for it contradicts the operator.
      'conflict:reconcile:failed->completed',
    ]);
    expect(history.at(-1)?.actor.kind).toBe('reconcile');
    expect((await store.ledger.get(TENANT, key))?.conflictAt).not.toBeNull();
  });
});
