import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Store } from '../../src/store/index.js';
import { defineTool, write, type Tool } from '../../src/tools/index.js';
import {
  OPERATOR,
  Runtimes,
  STORES,
  TENANT,
  callIdsOf,
  newRunId,
  scriptedAgent,
  waitFor,
  type OpenedStore,
} from './fixtures.js';

/*
 * A run's step whose calls go out in waves (a tool limited by `concurrency` whose slot is taken):
 * the driver's lease is lost while a later wave waits for its slot. The step cannot go on, but the
 * calls of the earlier wave that ran are recorded as what they came to, not left `started`.
 */

const LEASE_MS = 300;

function limitedTool(name: string, executions: string[]): Tool {
  return defineTool({
    name,
    description: `Charge through ${name}`,
    input: z.object({ n: z.number() }),
    effect: write(),
    timeoutMs: 5_000,
    concurrency: 1,
    execute: async (_args, ctx) => {
      await sleep(5);
      executions.push(ctx.idempotencyKey);
      return { ok: true };
    },
  });
}

describe.each(STORES)('tool slots in a run on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  beforeAll(async () => {
    opened = await open('runs_tool_slots');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  /**
   * A run whose one step calls a free tool and a busy one (concurrency 1, its slot held by another
   * process): the free call goes in the first wave, the busy one waits for its slot.
   */
  async function twoWaveRun(finalText: string) {
    const executions: string[] = [];
    const free = limitedTool(`free_${newRunId('t')}`, executions);
    const busy = limitedTool(`busy_${newRunId('t')}`, executions);
    expect(await store.toolSlots.acquire(busy.name, 1, 'another-process', 60_000)).toBe(0);
    const { agent } = scriptedAgent(
      [
        {
          toolCalls: [
            { toolName: free.name, input: { n: 1 } },
            { toolName: busy.name, input: { n: 2 } },
          ],
        },
        { text: finalText },
      ],
      [free, busy],
    );
    const runtime = runtimes.open(store, [agent], { leaseMs: LEASE_MS });
    const { run } = await runtime.startRun({
      tenantId: TENANT,
      agent: agent.name,
      input: 'Charge.',
      runId: newRunId(),
    });
    return { executions, free, busy, runtime, run, driving: runtime.drive(TENANT, run.runId) };
  }

  it('a lease lost while a later wave waits for a slot: the earlier wave’s completed call is recorded', async () => {
    // Another process holds the busy tool's only slot for the whole test.
    const { executions, free, busy, runtime, run, driving } = await twoWaveRun('unreachable');
    // The free tool's call ran and let go of its slot; the busy tool's call waits for its slot.
    await waitFor(() => executions.length === 1);
    await waitFor(async () => (await store.toolSlots.held(free.name)).length === 0);
    // The run is cancelled: the driver's lease is lost at its next renewal, mid-wait.
    await runtime.cancel(TENANT, run.runId, { reason: 'stop', actorId: OPERATOR });
    const after = await driving;
    await runtime.ledger.drain();

    expect(after.status).toBe('cancelled');
    const [freeCall, busyCall] = callIdsOf(after);
    expect(executions).toEqual([`${run.runId}:${freeCall}`]);
    expect(await store.ledger.get(TENANT, `${run.runId}:${freeCall}`)).toMatchObject({
      status: 'completed',
      attempt: 1,
    });
    // The waiting call was never reserved: nothing about it is unknown.
    expect(await store.ledger.get(TENANT, `${run.runId}:${busyCall}`)).toBeUndefined();
    expect(await store.toolSlots.held(free.name)).toEqual([]);
    expect((await store.toolSlots.held(busy.name)).map((h) => h.holder)).toEqual(['another-process']);
  });

  it('records an earlier wave’s outcome while a later wave waits for a slot, not with the step (found by the simulator)', async () => {
    // Held until the step ends, a known outcome waited with the later wave: past its attempt's
    // deadline, when a reconcile hook elsewhere could settle the call, and the late write then read
    // as a conflict (sim seed 200).
    const { executions, busy, run, driving } = await twoWaveRun('charged');
    await waitFor(() => executions.length === 1);
    const firstKey = executions[0]!;
    // The busy tool's call still waits for its slot, and the free tool's call is already settled.
    await waitFor(async () => (await store.ledger.get(TENANT, firstKey))?.status === 'completed');
    expect(executions).toHaveLength(1);
    expect(await store.ledger.history(TENANT, firstKey)).toMatchObject([
      { kind: 'transition', to: 'started' },
      { kind: 'transition', from: 'started', to: 'completed', actor: { kind: 'runtime' } },
    ]);
    // The slot comes free: the second wave runs, the step ends, the model hears both results.
    await store.toolSlots.release(busy.name, 0, 'another-process', 0);
    const after = await driving;
    expect(after.status).toBe('completed');
    expect(executions).toHaveLength(2);
    const [freeCall, busyCall] = callIdsOf(after);
    for (const call of [freeCall, busyCall]) {
      expect(await store.ledger.get(TENANT, `${run.runId}:${call}`)).toMatchObject({
        status: 'completed',
        conflictAt: null,
      });
    }
    // The first call's history holds one settlement: the step did not write it again.
    expect(await store.ledger.history(TENANT, `${run.runId}:${freeCall}`)).toHaveLength(2);
  });
});
