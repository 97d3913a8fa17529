import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RunRecord } from '../../src/run-state/index.js';
import type { Store } from '../../src/store/index.js';
import {
  Runtimes,
  STORES,
  TENANT,
  callIdsOf,
  eventTypes,
  keyOf,
  newRunId,
  scriptedAgent,
  startAndDrive,
  summary,
  toolCallIdsIn,
  toolResultsIn,
  type OpenedStore,
} from './fixtures.js';
import { z } from 'zod';
import { defineTool, external } from '../../src/tools/index.js';
import { CREDIT, ORDER, FakeDownstream, issueCredit, lookupOrder } from './tools.js';

/*
 * The loop end to end with the scripted model: call the model, mint ids, checkpoint the response
 * before any reservation, reserve, execute in parallel, record outcomes with the next checkpoint,
 * repeat until a final answer; max_steps and model errors end the run `failed`.
 */

const MINTED = /^call_[0-9a-f]{16}$/;

describe.each(STORES)('the run loop on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  beforeAll(async () => {
    opened = await open('runs_loop');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  it('completes a run with a parallel read and external write: minted ids, one record and one effect per key', async () => {
    const downstream = new FakeDownstream();
    const lookup = lookupOrder();
    const credit = issueCredit(downstream);
    const { agent, model } = scriptedAgent(
      [
        {
          text: 'Let me check the order and credit the account.',
          toolCalls: [
            { toolName: 'lookup_order', input: ORDER },
            { toolName: 'issue_credit', input: CREDIT },
          ],
        },
        { text: 'I credited $25.' },
      ],
      [lookup, credit],
    );
    const runtime = runtimes.open(store, [agent]);

    const run = await startAndDrive(runtime, 'Order ord_1 arrived broken; credit acct_7 $25.');

    expect(run).toMatchObject({ status: 'completed', result: { text: 'I credited $25.' }, error: null });
    const [lookupId, creditId] = callIdsOf(run);
    expect(callIdsOf(run)).toHaveLength(2);
    expect(lookupId).toMatch(MINTED);
    expect(creditId).toMatch(MINTED);
    expect(lookupId).not.toBe(creditId);
    const lookupKey = keyOf(run, lookupId ?? '');
    const creditKey = keyOf(run, creditId ?? '');

    // The checkpoint holds the whole conversation, with the runtime's ids, never the model's.
    expect(JSON.stringify(run.checkpoint)).not.toContain('model_call_');
    expect(run.checkpoint).toEqual({
      step: 2,
      pending: null,
      messages: [
        { role: 'user', content: 'Order ord_1 arrived broken; credit acct_7 $25.' },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Let me check the order and credit the account.' },
            { type: 'tool-call', toolCallId: lookupId, toolName: 'lookup_order', input: ORDER },
            { type: 'tool-call', toolCallId: creditId, toolName: 'issue_credit', input: CREDIT },
          ],
        },
        {
          role: 'tool',
          content: [
            {
              type: 'tool-result',
              toolCallId: lookupId,
              toolName: 'lookup_order',
              output: {
                type: 'json',
                value: {
                  status: 'completed',
                  result: { orderId: 'ord_1', status: 'delivered', amountCents: 2500 },
                },
              },
            },
            {
              type: 'tool-result',
              toolCallId: creditId,
              toolName: 'issue_credit',
              output: {
                type: 'json',
                value: { status: 'completed', result: { receipt: 'rcpt_1', ...CREDIT } },
              },
            },
          ],
        },
        { role: 'assistant', content: [{ type: 'text', text: 'I credited $25.' }] },
      ],
    });

    // One ledger record per key, keyed `<run_id>:<minted id>`, and one effect per key.
    const records = await store.ledger.list(TENANT, { runId: run.runId, limit: 10 });
    expect(records.map((r) => [r.idempotencyKey, r.toolName, r.status, r.attempt]).sort()).toEqual(
      [
        [lookupKey, 'lookup_order', 'completed', 1],
        [creditKey, 'issue_credit', 'completed', 1],
      ].sort(),
    );
    expect(records.find((r) => r.idempotencyKey === creditKey)?.resultReference).toBe('rcpt_1');
    expect(summary(await store.ledger.history(TENANT, creditKey))).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->completed',
    ]);
    expect(credit.executions).toEqual([creditKey]);
    expect(lookup.executions).toEqual([lookupKey]);
    expect(downstream.effects()).toEqual({ [creditKey]: 1 });

    // The model was called twice; the second time it heard both results, under the minted ids.
    expect(model.received).toHaveLength(2);
    expect(model.received[0]).toEqual([
      { role: 'system', content: 'You help with billing.' },
      { role: 'user', content: [{ type: 'text', text: 'Order ord_1 arrived broken; credit acct_7 $25.' }] },
    ]);
    expect(toolCallIdsIn(model.received[1])).toEqual([lookupId, creditId]);
    expect(toolResultsIn(model.received[1]).map((p) => [p.toolCallId, p.toolName])).toEqual([
      [lookupId, 'lookup_order'],
      [creditId, 'issue_credit'],
    ]);

    expect(await eventTypes(store, run.runId)).toEqual([
      'run.created',
      'run.claimed',
      'model.response',
      'tool.settled',
      'tool.settled',
      'model.response',
      'run.status',
    ]);
    const events = await store.runs.events(TENANT, run.runId, 0, 100);
    expect(events.at(-1)?.data).toEqual({ status: 'completed', reason: null });
    expect(events.find((e) => e.type === 'tool.settled')?.data).toEqual({
      key: lookupKey,
      toolName: 'lookup_order',
      heard: 'completed',
    });
  });

  it('makes the model response durable before any call of it is reserved', async () => {
    const downstream = new FakeDownstream();
    let seen: { run: RunRecord | undefined; records: number; toolCallId: string } | undefined;
    const credit = issueCredit(downstream, {
      before: async (ctx) => {
        seen = {
          run: await store.runs.get(TENANT, ctx.runId),
          // Only this call's own reservation exists while it runs.
          records: (await store.ledger.list(TENANT, { runId: ctx.runId, limit: 10 })).length,
          toolCallId: ctx.toolCallId,
        };
      },
    });
    const { agent } = scriptedAgent(
      [{ toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] }, { text: 'Done.' }],
      [credit],
    );
    const run = await startAndDrive(runtimes.open(store, [agent]), 'Credit acct_7 $25.');

    expect(run.status).toBe('completed');
    expect(seen).toBeDefined();
    const during = seen?.run;
    expect(during?.status).toBe('running');
    expect(during?.checkpoint.step).toBe(1);
    expect(during?.checkpoint.pending?.calls).toEqual([
      { toolCallId: seen?.toolCallId, toolName: 'issue_credit', input: CREDIT },
    ]);
    expect(callIdsOf(during as RunRecord)).toEqual([seen?.toolCallId]);
    expect(seen?.records).toBe(1);
    expect(seen?.toolCallId).toBe(callIdsOf(run)[0]);
  });

  it('mints a new id for every call even when the model repeats its own ids: two credits, two effects', async () => {
    const downstream = new FakeDownstream();
    // Identical credits the customer is owed, each its own effect: repeats allowed (see repeats.test.ts).
    const credit = issueCredit(downstream, { onRepeat: 'allow' });
    // The same provider id `dup` and the same arguments on both turns: the customer is owed two credits.
    const { agent } = scriptedAgent(
      [
        { toolCalls: [{ toolName: 'issue_credit', input: CREDIT, id: 'dup' }] },
        { toolCalls: [{ toolName: 'issue_credit', input: CREDIT, id: 'dup' }] },
        { text: 'Two credits issued.' },
      ],
      [credit],
    );
    const run = await startAndDrive(runtimes.open(store, [agent]), 'Credit acct_7 $25 twice.');

    expect(run.status).toBe('completed');
    const ids = callIdsOf(run);
    expect(ids).toHaveLength(2);
    expect(new Set(ids).size).toBe(2);
    expect(JSON.stringify(run.checkpoint)).not.toContain('"dup"');
    expect(downstream.effects()).toEqual({ [keyOf(run, ids[0] ?? '')]: 1, [keyOf(run, ids[1] ?? '')]: 1 });
  });

  it('commits each step twice: the response with the reservation of its calls, then their outcomes', async () => {
    const downstream = new FakeDownstream();
    // Identical credits the customer is owed, each its own effect: repeats allowed (see repeats.test.ts).
    const credit = issueCredit(downstream, { onRepeat: 'allow' });
    const step = {
      toolCalls: [
        { toolName: 'issue_credit', input: CREDIT },
        { toolName: 'issue_credit', input: CREDIT },
      ],
    };
    const { agent } = scriptedAgent([step, step, step, { text: 'Six credits.' }], [credit]);
    // The runtime writes through this view of the store: its own transactions, its step writes and
    // the writes it makes outside them are counted; what a transaction writes inside it is not.
    const counts = { transactions: 0, reserveSteps: 0, recordSteps: 0, checkpoints: 0 };
    const runs = Object.create(store.runs) as Store['runs'];
    runs.saveCheckpoint = (request) => {
      counts.checkpoints += 1;
      return store.runs.saveCheckpoint(request);
    };
    const counted = Object.create(store) as Store;
    Object.assign(counted, {
      runs,
      transaction: <T>(fn: Parameters<Store['transaction']>[0]) => {
        counts.transactions += 1;
        return store.transaction(fn) as Promise<T>;
      },
      reserveStep: (request: Parameters<Store['reserveStep']>[0]) => {
        counts.reserveSteps += 1;
        return store.reserveStep(request);
      },
      recordStep: (request: Parameters<Store['recordStep']>[0]) => {
        counts.recordSteps += 1;
        return store.recordStep(request);
      },
    });
    const run = await startAndDrive(runtimes.open(counted, [agent]), 'Credit acct_7 $25, six times.');
    expect(run.status).toBe('completed');
    expect(Object.values(downstream.effects())).toEqual(Array(6).fill(1));
    // Three steps: two writes each, the response with its reservations and the outcomes with the
    // checkpoint that tells them; the final answer is the one checkpoint saved on its own.
    expect(counts).toEqual({ transactions: 0, reserveSteps: 3, recordSteps: 3, checkpoints: 1 });
    const responses = (await store.runs.events(TENANT, run.runId, 0, 100)).filter(
      (e) => e.type === 'model.response',
    );
    expect(responses.map((e) => (e.data as { step: number }).step)).toEqual([1, 2, 3, 4]);
  });

  it('tells the model what stands when an outcome loses to an operator who settled the call mid-attempt', async () => {
    // The step's one write assumes its outcomes apply; here one does not, and the checkpoint must
    // tell what was written instead (the operator's failed, the late effect filed as a conflict).
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let started: (key: string) => void = () => undefined;
    const running = new Promise<string>((resolve) => (started = resolve));
    const credit = defineTool({
      name: 'slow_credit',
      description: 'credit, slowly',
      input: z.object({ cents: z.number() }),
      effect: external(),
      execute: async (args, ctx) => {
        started(ctx.idempotencyKey);
        await gate;
        return { receipt: `r_${args.cents}` };
      },
    });
    const { agent, model } = scriptedAgent(
      [{ toolCalls: [{ toolName: 'slow_credit', input: { cents: 2500 } }] }, { text: 'Told.' }],
      [credit],
    );
    const counts = { recordSteps: 0 };
    const counted = Object.create(store) as Store;
    Object.assign(counted, {
      recordStep: (request: Parameters<Store['recordStep']>[0]) => {
        counts.recordSteps += 1;
        return store.recordStep(request);
      },
    });
    const runtime = runtimes.open(counted, [agent]);
    const driving = startAndDrive(runtime, 'Credit $25.');
    const key = await running;
    await runtime.resolve({
      tenantId: TENANT,
      idempotencyKey: key,
      status: 'failed',
      reason: 'nothing in the billing console',
      actorId: 'ops-ana',
      force: true,
    });
    release();
    const run = await driving;
    expect(run.status).toBe('completed');
    expect(counts).toEqual({ recordSteps: 1 }); // then told from what was written, in a transaction
    const record = await store.ledger.get(TENANT, key);
    expect(record).toMatchObject({ status: 'failed', settledBy: { kind: 'operator', id: 'ops-ana' } });
    expect(record?.conflictAt).not.toBeNull();
    expect(summary(await store.ledger.history(TENANT, key))).toEqual([
      'transition:reserve:-->started',
      'transition:resolve:started->failed',
      'conflict:outcome:failed->completed',
    ]);
    // The effect landed after the operator's forced `failed` (a conflict): the model hears that it
    // took effect, never "did not take effect" about a credit that stands.
    const heard = toolResultsIn(model.received[1]);
    expect(heard).toHaveLength(1);
    expect(heard[0]?.output).toMatchObject({
      type: 'json',
      value: { status: 'took_effect', settled_by: 'operator ops-ana' },
    });
  });

  it('runs a step of 16 credits without a listener-leak warning, one effect per key', async () => {
    const downstream = new FakeDownstream();
    // Identical credits the customer is owed, each its own effect: repeats allowed (see repeats.test.ts).
    const credit = issueCredit(downstream, { onRepeat: 'allow' });
    const calls = Array.from({ length: 16 }, () => ({ toolName: 'issue_credit', input: CREDIT }));
    const { agent } = scriptedAgent([{ toolCalls: calls }, { text: 'Sixteen credits.' }], [credit]);
    const warnings: string[] = [];
    const onWarning = (warning: Error): void => {
      warnings.push(`${warning.name}: ${warning.message}`);
    };
    process.on('warning', onWarning);
    try {
      const run = await startAndDrive(runtimes.open(store, [agent]), 'Credit acct_7 sixteen times.');
      expect(run.status).toBe('completed');
      const ids = callIdsOf(run);
      expect(ids).toHaveLength(16);
      expect(Object.values(downstream.effects())).toEqual(Array(16).fill(1));
      // Warnings are emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings.filter((w) => w.includes('MaxListenersExceeded'))).toEqual([]);
  });

  it('fails a run that reaches max_steps without a final answer (RUN_MAX_STEPS)', async () => {
    const lookup = lookupOrder();
    const { agent, model } = scriptedAgent(
      () => ({ toolCalls: [{ toolName: 'lookup_order', input: ORDER }] }),
      [lookup],
      { maxSteps: 3 },
    );
    const run = await startAndDrive(runtimes.open(store, [agent]), 'Loop forever.');

    expect(run.status).toBe('failed');
    expect(run.error?.code).toBe('RUN_MAX_STEPS');
    expect(run.statusReason).toContain('max_steps');
    expect(model.received).toHaveLength(3);
    expect(lookup.executions).toHaveLength(3);
    expect(run.checkpoint).toMatchObject({ step: 3, pending: null });
    expect(await eventTypes(store, run.runId)).toContain('run.status');
  });

  it('fails a run whose model call fails, without running any tool', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const { agent } = scriptedAgent(() => {
      throw new Error('the provider is down');
    }, [credit]);
    const run = await startAndDrive(runtimes.open(store, [agent]), 'Credit acct_7 $25.');

    expect(run.status).toBe('failed');
    expect(run.error?.code).toBe('MODEL_CALL_FAILED');
    expect(run.error?.message).toContain('the provider is down');
    expect(run.checkpoint).toMatchObject({ step: 0, pending: null });
    expect(credit.executions).toEqual([]);
  });

  it('fails a run whose scripted model runs out of script (MODEL_OUTPUT_INVALID)', async () => {
    const { agent } = scriptedAgent(
      [{ toolCalls: [{ toolName: 'lookup_order', input: ORDER }] }],
      [lookupOrder()],
    );
    const run = await startAndDrive(runtimes.open(store, [agent]), 'Look up ord_1.');
    expect(run.status).toBe('failed');
    expect(run.error?.code).toBe('MODEL_OUTPUT_INVALID');
  });

  it('starts and drives a run with run(): claimed as it is created, the events of startRun then drive, one write less', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const step = { toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] };
    const { agent } = scriptedAgent([step, { text: 'Credited.' }], [credit]);
    const { agent: twin } = scriptedAgent([step, { text: 'Credited.' }], [issueCredit(new FakeDownstream())]);
    let creates = 0;
    let claims = 0;
    const runs = Object.create(store.runs) as Store['runs'];
    runs.create = (request) => {
      creates += 1;
      expect(request.claim?.owner).toBe('runner');
      return store.runs.create(request);
    };
    runs.claim = (...args) => {
      claims += 1;
      return store.runs.claim(...args);
    };
    const counted = Object.assign(Object.create(store) as Store, { runs });
    const runtime = runtimes.open(counted, [agent], { owner: 'runner' });
    const runId = newRunId();
    const run = await runtime.run({
      tenantId: TENANT,
      agent: agent.name,
      input: 'Credit acct_7 $25.',
      runId,
    });
    expect(run.status).toBe('completed');
    expect({ creates, claims }).toEqual({ creates: 1, claims: 0 });
    expect(Object.values(downstream.effects())).toEqual([1]);
    expect(run.leaseEpoch).toBe(1);
    const events = await store.runs.events(TENANT, runId, 0, 100);
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.slice(0, 2).map((e) => [e.type, e.data])).toEqual([
      ['run.created', { agent: agent.name, status: 'queued' }],
      ['run.claimed', { owner: 'runner', epoch: 1, driveAttempt: 1 }],
    ]);
    // The same run as startRun then drive would leave, events and all (ids and times aside).
    const other = runtimes.open(store, [twin], { owner: 'runner' });
    const { run: started } = await other.startRun({
      tenantId: TENANT,
      agent: twin.name,
      input: 'Credit acct_7 $25.',
    });
    await other.drive(TENANT, started.runId);
    expect(await eventTypes(store, runId)).toEqual(await eventTypes(store, started.runId));

    // The same id again: nothing is created or run twice; the run is answered as it stands.
    const again = await runtime.run({
      tenantId: TENANT,
      agent: agent.name,
      input: 'Credit acct_7 $25.',
      runId,
    });
    expect(again.status).toBe('completed');
    expect(Object.values(downstream.effects())).toEqual([1]);
    await expect(
      runtime.run({ tenantId: TENANT, agent: agent.name, input: 'Credit acct_7 $99.', runId }),
    ).rejects.toMatchObject({ code: 'RUN_CONFLICT' });
  });

  it('lets one of two runtimes drive a run both are asked to drive at once: one effect per key', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const lookup = lookupOrder();
    const { agent, model } = scriptedAgent(
      [
        {
          toolCalls: [
            { toolName: 'lookup_order', input: ORDER },
            { toolName: 'issue_credit', input: CREDIT },
          ],
        },
        { text: 'Done.' },
      ],
      [lookup, credit],
    );
    const other = await opened.openPeer();
    try {
      const a = runtimes.open(store, [agent], { owner: 'worker-a' });
      const b = runtimes.open(other.store, [agent], { owner: 'worker-b' });
      const { run } = await a.startRun({
        tenantId: TENANT,
        agent: agent.name,
        input: 'Credit.',
        runId: newRunId(),
      });

      await Promise.all([a.drive(TENANT, run.runId), b.drive(TENANT, run.runId)]);

      const done = await a.getRun(TENANT, run.runId);
      expect(done.status).toBe('completed');
      const claims = (await store.runs.events(TENANT, run.runId, 0, 100)).filter(
        (e) => e.type === 'run.claimed',
      );
      expect(claims).toHaveLength(1);
      const [lookupId, creditId] = callIdsOf(done);
      const creditKey = keyOf(done, creditId ?? '');
      expect(downstream.effects()).toEqual({ [creditKey]: 1 });
      expect(credit.executions).toEqual([creditKey]);
      expect(lookup.executions).toEqual([keyOf(done, lookupId ?? '')]);
      expect(model.received).toHaveLength(2);
      expect(await store.ledger.list(TENANT, { runId: run.runId, limit: 10 })).toHaveLength(2);
    } finally {
      await runtimes.closeAll();
      await other.close();
    }
  });
});
