import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ledger, executeToolCall, executeToolCalls } from '../../src/calls/index.js';
import { openStore, type Store, type ToolSlotStore } from '../../src/store/index.js';
import { defineTool, write, type Tool } from '../../src/tools/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';

/*
 * Tool slots (a tool's `concurrency`) under failure, on a real SQLite file and a real PostgreSQL
 * database: a store error while a wave takes its slots lets go of those it took (no slot held for
 * the life of the process, no renewal left running), and an abort while a later wave waits for a
 * slot still records what the earlier waves' calls came to before it is thrown.
 */

type Opened = { store: Store; cleanup(): Promise<void> };

const STORES: [string, () => Promise<Opened>][] = [
  [
    'sqlite',
    async () => {
      const file = tempSqlitePath('tool_slots');
      const store = await openStore(`sqlite:${file.path}`, { migrate: true });
      return { store, cleanup: async () => (await store.close(), file.cleanup()) };
    },
  ],
  [
    'postgres',
    async () => {
      const db = await createTestDatabase('tool_slots');
      const store = await openStore(db.url, { migrate: true });
      return { store, cleanup: async () => (await store.close(), await db.drop()) };
    },
  ],
];

const TENANT = 'acme';
/** Short, so a renewal would show within a few hundred milliseconds and a leaked slot stays leaked. */
const LEASE_MS = 600;
let seq = 0;

/** A write tool limited to one call at once, counting its executions. */
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

type Acquire = ToolSlotStore['acquire'];

/**
 * Makes the store's `nth` slot acquire from now on throw (the slot store itself stays real: every
 * other acquire is the real statement); counts renewals. Undone by the returned function.
 */
function injectSlotFaults(slots: ToolSlotStore, nth: number): { renewals: () => number; undo(): void } {
  const proto = Object.getPrototypeOf(slots) as ToolSlotStore;
  let acquires = 0;
  let renewals = 0;
  const target = slots;
  target.acquire = function (this: ToolSlotStore, ...args: Parameters<Acquire>) {
    acquires += 1;
    if (acquires === nth) return Promise.reject(new Error('injected: the store is unreachable'));
    return proto.acquire.apply(this, args);
  };
  target.renew = function (this: ToolSlotStore, ...args: Parameters<ToolSlotStore['renew']>) {
    renewals += 1;
    return proto.renew.apply(this, args);
  };
  return {
    renewals: () => renewals,
    undo: () => {
      delete (target as Partial<ToolSlotStore>).acquire;
      delete (target as Partial<ToolSlotStore>).renew;
    },
  };
}

describe.each(STORES)('tool slots on %s', (_name, open) => {
  let opened: Opened;
  let store: Store;
  const undo: (() => void)[] = [];

  beforeAll(async () => {
    opened = await open();
    store = opened.store;
  });
  afterEach(() => {
    for (let job = undo.pop(); job !== undefined; job = undo.pop()) job();
  });
  afterAll(() => opened.cleanup());

  it('a store error on the second slot of a wave lets go of the first: the tool runs again at once, nothing renews', async () => {
    const executions: string[] = [];
    const first = limitedTool(`first_${++seq}`, executions);
    const second = limitedTool(`second_${seq}`, executions);
    const ledger = new Ledger(store, { toolSlotLeaseMs: LEASE_MS, landingMarginMs: 0 });
    const faults = injectSlotFaults(store.toolSlots, 2);
    undo.push(() => faults.undo());
    const runId = `run_fault_${seq}`;

    const refused = await executeToolCalls(ledger, [
      { tool: first, args: { n: 1 }, runId, toolCallId: 'call_1', tenantId: TENANT },
      { tool: second, args: { n: 2 }, runId, toolCallId: 'call_2', tenantId: TENANT },
    ]).then(
      () => 'no error',
      (error: unknown) => String(error),
    );
    expect(refused).toMatch(/injected: the store is unreachable/);
    // Nothing was reserved or run: the wave never started.
    expect(executions).toEqual([]);
    expect(await store.ledger.get(TENANT, `${runId}:call_1`)).toBeUndefined();

    // The first tool's slot is free again, and stays free: no renewal keeps it taken.
    expect(await store.toolSlots.held(first.name)).toEqual([]);
    await sleep(LEASE_MS); // three renewal periods
    expect(faults.renewals()).toBe(0);
    expect(await store.toolSlots.held(first.name)).toEqual([]);

    // A new call of that `concurrency: 1` tool takes the slot and runs, well within the lease.
    const outcome = await executeToolCall(
      ledger,
      first,
      { n: 3 },
      { runId, toolCallId: 'call_3', tenantId: TENANT },
      { signal: AbortSignal.timeout(LEASE_MS) },
    );
    expect(outcome.status).toBe('completed');
    expect(executions).toEqual([`${runId}:call_3`]);
    expect(await store.toolSlots.held(first.name)).toEqual([]);
  });

  it('an abort while a later wave waits for a slot records the earlier wave’s completed calls first', async () => {
    const executions: string[] = [];
    const free = limitedTool(`free_${++seq}`, executions);
    const busy = limitedTool(`busy_${seq}`, executions);
    const ledger = new Ledger(store, { toolSlotLeaseMs: 60_000, landingMarginMs: 0 });
    // Another process holds the busy tool's only slot for the whole test.
    expect(await store.toolSlots.acquire(busy.name, 1, 'another-process', 60_000)).toBe(0);
    const runId = `run_abort_${seq}`;
    const caller = new AbortController();

    const batch = executeToolCalls(
      ledger,
      [
        { tool: free, args: { n: 1 }, runId, toolCallId: 'call_1', tenantId: TENANT },
        { tool: busy, args: { n: 2 }, runId, toolCallId: 'call_2', tenantId: TENANT },
      ],
      { signal: caller.signal },
    ).then(
      () => 'no error',
      (error: unknown) => (error instanceof Error ? error.name : String(error)),
    );
    // The first wave (the free tool's call) ran and let go of its slot; the busy tool's call waits.
    for (let i = 0; i < 500 && executions.length === 0; i++) await sleep(10);
    expect(executions).toEqual([`${runId}:call_1`]);
    for (let i = 0; i < 500 && (await store.toolSlots.held(free.name)).length > 0; i++) await sleep(10);
    caller.abort();

    expect(await batch).toBe('AbortError');
    // The call that ran is recorded as what it came to, not left `started` (unknown).
    expect(await store.ledger.get(TENANT, `${runId}:call_1`)).toMatchObject({
      status: 'completed',
      attempt: 1,
    });
    // The waiting call was never reserved, so nothing about it is unknown.
    expect(await store.ledger.get(TENANT, `${runId}:call_2`)).toBeUndefined();
    expect(await store.toolSlots.held(free.name)).toEqual([]);
    expect((await store.toolSlots.held(busy.name)).map((h) => h.holder)).toEqual(['another-process']);
  });

  it('records an earlier wave’s outcome while a later wave waits for a slot, and answers it in order at the end', async () => {
    const executions: string[] = [];
    const free = limitedTool(`free_${++seq}`, executions);
    const busy = limitedTool(`busy_${seq}`, executions);
    const ledger = new Ledger(store, { toolSlotLeaseMs: 60_000, landingMarginMs: 0 });
    expect(await store.toolSlots.acquire(busy.name, 1, 'another-process', 60_000)).toBe(0);
    const runId = `run_waves_${seq}`;
    const batch = executeToolCalls(ledger, [
      { tool: free, args: { n: 1 }, runId, toolCallId: 'call_1', tenantId: TENANT },
      { tool: busy, args: { n: 2 }, runId, toolCallId: 'call_2', tenantId: TENANT },
    ]);
    for (let i = 0; i < 500 && executions.length === 0; i++) await sleep(10);
    // While the second call waits for its slot, the first is already recorded as what it came to.
    let first = await store.ledger.get(TENANT, `${runId}:call_1`);
    for (let i = 0; i < 500 && first?.status !== 'completed'; i++) {
      await sleep(10);
      first = await store.ledger.get(TENANT, `${runId}:call_1`);
    }
    expect(first?.status).toBe('completed');
    expect(executions).toEqual([`${runId}:call_1`]);
    await store.toolSlots.release(busy.name, 0, 'another-process', 0);
    const outcomes = await batch;
    expect(outcomes.map((o) => o.status)).toEqual(['completed', 'completed']);
    expect(outcomes[0]).toMatchObject({ status: 'completed', value: { ok: true }, replayed: false });
    expect(await store.ledger.history(TENANT, `${runId}:call_1`)).toHaveLength(2);
    expect(executions).toEqual([`${runId}:call_1`, `${runId}:call_2`]);
  });
});
