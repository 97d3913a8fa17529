import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { prepareCall } from '../../src/calls/index.js';
import type { Store } from '../../src/store/index.js';
import {
  NOTE,
  Runtimes,
  STORES,
  TENANT,
  callIdsOf,
  deferred,
  doomedConnection,
  keyOf,
  newRunId,
  scriptedAgent,
  seedDeadWorkerStep,
  summary,
  toolCallIdsIn,
  toolResultsIn,
  untilLeaseExpired,
  type OpenedStore,
  recoverWhenLanded,
} from './fixtures.js';
import { CREDIT, ORDER, FakeDownstream, issueCredit, lookupOrder } from './tools.js';

/*
 * Recovery: a run whose driver died is claimed by another runtime with a higher epoch and replayed
 * from its checkpoint. Completed calls come back from the ledger, unknown ones ask the reconcile hook
 * first, calls that did not take effect run again with the same key; a live driver is left alone.
 */

describe.each(STORES)('recovery and replay on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  beforeAll(async () => {
    opened = await open('runs_replay');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  it('replays a step whose calls a dead worker completed: from the ledger, with a higher epoch, nothing run again', async () => {
    const downstream = new FakeDownstream();
    const lookup = lookupOrder();
    const credit = issueCredit(downstream);
    const { agent, model } = scriptedAgent([{ text: 'unused' }, { text: 'Done.' }], [lookup, credit]);
    const seeder = runtimes.open(store, [agent], { owner: 'seeder' });
    const seeded = await seedDeadWorkerStep(
      seeder,
      agent.name,
      [
        { tool: lookup.tool, input: ORDER },
        { tool: credit.tool, input: CREDIT },
      ],
      { execute: true },
    );
    const histories = await Promise.all(seeded.keys.map((k) => store.ledger.history(TENANT, k)));

    const other = await opened.openPeer();
    try {
      const recovering = runtimes.open(other.store, [agent], { owner: 'recoverer' });
      const recovered = await recovering.recover();

      expect(recovered).toEqual([
        { tenantId: TENANT, runId: seeded.runId, end: { kind: 'ended', status: 'completed' } },
      ]);
    } finally {
      await runtimes.closeAll();
      await other.close();
    }
    const run = await store.runs.get(TENANT, seeded.runId);
    expect(run).toMatchObject({ status: 'completed', leaseEpoch: 2, checkpoint: { step: 2, pending: null } });
    expect(callIdsOf(run ?? (undefined as never))).toEqual(seeded.toolCallIds);
    const claims = (await store.runs.events(TENANT, seeded.runId, 0, 100)).filter(
      (e) => e.type === 'run.claimed',
    );
    expect(claims.map((e) => e.data)).toEqual([
      // A drive that died with its process counts: the recoverer's is the run's second attempt.
      { owner: 'dead-worker', epoch: 1, driveAttempt: 1 },
      { owner: 'recoverer', epoch: 2, driveAttempt: 2 },
    ]);
    // The ledger was only read: not one event was added to either record.
    expect(await Promise.all(seeded.keys.map((k) => store.ledger.history(TENANT, k)))).toEqual(histories);
    expect(lookup.executions).toEqual([seeded.keys[0]]);
    expect(credit.executions).toEqual([seeded.keys[1]]);
    expect(downstream.effects()).toEqual({ [seeded.keys[1] ?? '']: 1 });
    expect(toolCallIdsIn(model.received[0])).toEqual(seeded.toolCallIds);
    expect(
      toolResultsIn(model.received[0]).map((h) => (h.output as { value: { status: string } }).value.status),
    ).toEqual(['completed', 'completed']);
  });

  it('recovers a step whose worker lost its database after the effects: the reconcile hook finds the credit, the read runs again', async () => {
    const downstream = new FakeDownstream();
    const doomedDb = await doomedConnection(opened, runtimes);
    doomedDb.arm(true);
    const lookup = lookupOrder();
    const credit = issueCredit(downstream, {
      reconcile: true,
      after: async () => {
        await doomedDb.loseIfArmed();
      },
    });
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
    const doomed = runtimes.open(doomedDb.store, [agent], { owner: 'doomed', leaseMs: 300 });
    const { run } = await doomed.startRun({
      tenantId: TENANT,
      agent: agent.name,
      input: 'Credit.',
      runId: newRunId(),
    });

    await expect(doomed.drive(TENANT, run.runId)).rejects.toThrow();
    doomedDb.arm(false);
    const stranded = await store.runs.get(TENANT, run.runId);
    const [lookupId, creditId] = callIdsOf(stranded ?? (undefined as never));
    const lookupKey = keyOf(run, lookupId ?? '');
    const creditKey = keyOf(run, creditId ?? '');
    expect(stranded).toMatchObject({ status: 'running', leaseOwner: 'doomed', checkpoint: { step: 1 } });
    expect((await store.ledger.get(TENANT, creditKey))?.status).toBe('started');
    expect((await store.ledger.get(TENANT, lookupKey))?.status).toBe('started');

    const recovering = runtimes.open(store, [agent], { owner: 'recoverer' });
    expect(await recovering.recover()).toEqual([]); // the lease still holds
    await untilLeaseExpired(store, run.runId);
    // The dead driver's attempts are younger than their timeout: the recovery waits them out first.
    const recovered = await recoverWhenLanded(recovering);

    expect(recovered.map((r) => r.end)).toEqual([{ kind: 'ended', status: 'completed' }]);
    expect(credit.executions).toEqual([creditKey]);
    expect(lookup.executions).toEqual([lookupKey, lookupKey]);
    expect(downstream.effects()).toEqual({ [creditKey]: 1 });
    expect(summary(await store.ledger.history(TENANT, creditKey))).toEqual([
      'transition:reserve:-->started',
      'transition:reconcile:started->completed',
    ]);
    expect(summary(await store.ledger.history(TENANT, lookupKey))).toEqual([
      'transition:reserve:-->started',
      'transition:reconcile:started->failed',
      'transition:reserve:failed->started',
      'transition:outcome:started->completed',
    ]);
    expect(toolResultsIn(model.received.at(-1)).map((h) => h.output)).toEqual([
      {
        type: 'json',
        value: { status: 'completed', result: { orderId: 'ord_1', status: 'delivered', amountCents: 2500 } },
      },
      { type: 'json', value: { status: 'completed', result: { receipt: 'rcpt_1', ...CREDIT } } },
    ]);
  });

  it('runs a call again with the same key when a dead worker reserved it but nothing reached the service', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { reconcile: true });
    const { agent } = scriptedAgent([{ text: 'unused' }, { text: 'Done.' }], [credit]);
    const runtime = runtimes.open(store, [agent]);
    const seeded = await seedDeadWorkerStep(runtime, agent.name, [{ tool: credit.tool, input: CREDIT }], {
      execute: false,
    });
    const key = seeded.keys[0] ?? '';
    const { request } = prepareCall({
      tenantId: TENANT,
      runId: seeded.runId,
      toolCallId: seeded.toolCallIds[0] ?? '',
      tool: credit.tool,
      args: CREDIT,
    });
    // The dead worker's attempt is long gone: it can no longer land.
    await store.ledger.reserve([{ ...request, attemptTimeoutMs: 0 }], { kind: 'runtime', id: 'dead-worker' });

    const recovered = await runtime.recover();

    expect(recovered.map((r) => r.end)).toEqual([{ kind: 'ended', status: 'completed' }]);
    expect(credit.executions).toEqual([key]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
    expect(await store.ledger.get(TENANT, key)).toMatchObject({ status: 'completed', attempt: 2 });
  });

  it("gives the tool the recovering driver's lease epoch as ctx.fencingToken, above the dead worker's", async () => {
    const downstream = new FakeDownstream();
    const tokens: (number | undefined)[] = [];
    const credit = issueCredit(downstream, {
      reconcile: true,
      before: (ctx) => void tokens.push(ctx.fencingToken),
    });
    const { agent } = scriptedAgent([{ text: 'unused' }, { text: 'Done.' }], [credit]);
    const runtime = runtimes.open(store, [agent]);
    const seeded = await seedDeadWorkerStep(runtime, agent.name, [{ tool: credit.tool, input: CREDIT }], {
      execute: false,
    });
    const deadEpoch = (await store.runs.get(TENANT, seeded.runId))?.leaseEpoch ?? 0;
    expect(deadEpoch).toBeGreaterThan(0);

    expect((await runtime.recover()).map((r) => r.end)).toEqual([{ kind: 'ended', status: 'completed' }]);
    const recoveredEpoch = (await store.runs.get(TENANT, seeded.runId))?.leaseEpoch;
    expect(recoveredEpoch).toBeGreaterThan(deadEpoch);
    expect(tokens).toEqual([recoveredEpoch]);
    expect(downstream.effectsOf(seeded.keys[0] ?? '')).toBe(1);
  });

  it('pauses a replayed call that a dead worker left started when no hook can tell, naming it', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const { agent, model } = scriptedAgent([{ text: 'unused' }], [credit], { onIndeterminate: 'pause' });
    const runtime = runtimes.open(store, [agent]);
    const seeded = await seedDeadWorkerStep(runtime, agent.name, [{ tool: credit.tool, input: CREDIT }], {
      execute: false,
    });
    const key = seeded.keys[0] ?? '';
    const { request } = prepareCall({
      tenantId: TENANT,
      runId: seeded.runId,
      toolCallId: seeded.toolCallIds[0] ?? '',
      tool: credit.tool,
      args: CREDIT,
    });
    // The dead worker's attempt is long gone: it can no longer land.
    await store.ledger.reserve([{ ...request, attemptTimeoutMs: 0 }], { kind: 'runtime', id: 'dead-worker' });

    const recovered = await runtime.recover();

    const [end] = recovered.map((r) => r.end);
    expect(end).toMatchObject({ kind: 'ended', status: 'awaiting_reconciliation' });
    expect(end?.kind === 'ended' ? end.reason : undefined).toContain(`oncely executions resolve ${key}`);
    expect((await runtime.getRun(TENANT, seeded.runId)).statusReason).toContain(
      `oncely executions resolve ${key}`,
    );
    expect(credit.executions).toEqual([]);
    expect(model.received).toHaveLength(0);
    expect((await store.ledger.get(TENANT, key))?.status).toBe('started');
  });

  it('tells the recorded truth about a completed call whose tool changed since, never "not run"', async () => {
    const downstream = new FakeDownstream();
    const before = issueCredit(downstream);
    // After a deploy the tool is stricter: the call as the model made it would not pass any more.
    const after = issueCredit(downstream, { maxAmountCents: 1000 });
    const old = scriptedAgent([{ text: 'unused' }], [before]);
    const { agent, model } = scriptedAgent([{ text: 'unused' }, { text: 'Done.' }], [after], {
      name: old.agent.name,
    });
    const seeded = await seedDeadWorkerStep(
      runtimes.open(store, [old.agent], { owner: 'before-deploy' }),
      agent.name,
      [{ tool: before.tool, input: CREDIT }],
      { execute: true },
    );
    const key = seeded.keys[0] ?? '';

    const recovered = await runtimes.open(store, [agent], { owner: 'after-deploy' }).recover();

    expect(recovered.map((r) => r.end)).toEqual([{ kind: 'ended', status: 'completed' }]);
    expect(toolResultsIn(model.received[0]).map((h) => h.output)).toEqual([
      {
        type: 'json',
        value: { status: 'completed', result: { receipt: 'rcpt_1', ...CREDIT }, note: NOTE.replayed },
      },
    ]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
    expect(before.executions).toEqual([key]);
    expect(after.executions).toEqual([]);
  });

  it('keeps an unknown call unknown when its tool is gone since, instead of telling the model it was not run', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const old = scriptedAgent([{ text: 'unused' }], [credit]);
    const renamed = issueCredit(downstream, { name: 'grant_credit' });
    const { agent, model } = scriptedAgent([{ text: 'unused' }, { text: 'Done.' }], [renamed], {
      name: old.agent.name,
      onIndeterminate: 'pause',
    });
    const runtime = runtimes.open(store, [agent], { owner: 'after-deploy' });
    const seeded = await seedDeadWorkerStep(
      runtimes.open(store, [old.agent], { owner: 'before-deploy' }),
      agent.name,
      [{ tool: credit.tool, input: CREDIT }],
      { execute: false },
    );
    const key = seeded.keys[0] ?? '';
    const { request } = prepareCall({
      tenantId: TENANT,
      runId: seeded.runId,
      toolCallId: seeded.toolCallIds[0] ?? '',
      tool: credit.tool,
      args: CREDIT,
    });
    // The dead worker's attempt is long gone: it can no longer land.
    await store.ledger.reserve([{ ...request, attemptTimeoutMs: 0 }], { kind: 'runtime', id: 'dead-worker' });

    const recovered = await runtime.recover();

    const [end] = recovered.map((r) => r.end);
    expect(end).toMatchObject({ kind: 'ended', status: 'awaiting_reconciliation' });
    expect(end?.kind === 'ended' ? end.reason : undefined).toContain(`oncely executions resolve ${key}`);
    expect(model.received).toHaveLength(0);
    await runtime.resolve({
      tenantId: TENANT,
      idempotencyKey: key,
      status: 'failed',
      reason: 'no such credit in billing',
      actorId: 'ops-ana',
    });
    expect((await runtime.drive(TENANT, seeded.runId)).status).toBe('completed');
    expect(toolResultsIn(model.received[0]).map((h) => h.output)).toEqual([
      {
        type: 'error-json',
        value: {
          status: 'did_not_take_effect',
          reason: 'no such credit in billing',
          settled_by: 'operator ops-ana',
          note: NOTE.didNotTakeEffect,
        },
      },
    ]);
    expect(credit.executions).toEqual([]);
    expect(renamed.executions).toEqual([]);
  });

  it('tells what the ledger says about a call whose input parses to other arguments since a deploy, and never runs it again', async () => {
    const downstream = new FakeDownstream();
    const before = issueCredit(downstream);
    const old = scriptedAgent([{ text: 'unused' }], [before.tool]);
    // The new deploy fills in a currency: the same input now parses to other arguments (another digest).
    const after = issueCredit(downstream, { currency: 'EUR' });
    const { agent, model } = scriptedAgent([{ text: 'unused' }, { text: 'Done.' }], [after.tool], {
      name: old.agent.name,
    });
    const seeded = await seedDeadWorkerStep(
      runtimes.open(store, [old.agent], { owner: 'before-deploy' }),
      agent.name,
      [{ tool: before.tool, input: CREDIT }],
      { execute: true },
    );
    const key = seeded.keys[0] ?? '';
    expect(before.executions).toEqual([key]);

    const recovered = await runtimes.open(store, [agent], { owner: 'after-deploy' }).recover();

    expect(recovered.map((r) => r.end)).toEqual([{ kind: 'ended', status: 'completed' }]);
    expect(toolResultsIn(model.received[0]).map((h) => h.output)).toEqual([
      {
        type: 'json',
        value: { status: 'completed', result: { receipt: 'rcpt_1', ...CREDIT }, note: NOTE.replayed },
      },
    ]);
    expect(after.executions).toEqual([]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
    expect(summary(await store.ledger.history(TENANT, key))).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->completed',
    ]);
  });

  it('leaves a run alone while its driver holds the lease', async () => {
    const downstream = new FakeDownstream();
    const started = deferred();
    const gate = deferred();
    const credit = issueCredit(downstream, {
      before: async () => {
        started.resolve();
        await gate.promise;
      },
    });
    const { agent } = scriptedAgent(
      [{ toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] }, { text: 'Done.' }],
      [credit],
    );
    const live = runtimes.open(store, [agent], { owner: 'live', leaseMs: 600 });
    const other = await opened.openPeer();
    try {
      const recovering = runtimes.open(other.store, [agent], { owner: 'recoverer' });
      const { run } = await live.startRun({
        tenantId: TENANT,
        agent: agent.name,
        input: 'Credit.',
        runId: newRunId(),
      });
      const driving = live.drive(TENANT, run.runId);
      await started.promise;
      // Longer than the lease: the live driver renews it.
      await new Promise((r) => setTimeout(r, 800));

      expect(await recovering.recover()).toEqual([]);
      expect((await recovering.drive(TENANT, run.runId)).leaseOwner).toBe('live');
      gate.resolve();
      expect((await driving).status).toBe('completed');
      expect(credit.executions).toHaveLength(1);
      expect(Object.values(downstream.effects())).toEqual([1]);
    } finally {
      await runtimes.closeAll();
      await other.close();
    }
  });
});
