import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { argsDigest } from '../../src/ledger/index.js';
import type { Store } from '../../src/store/index.js';
import {
  NOTE,
  OPERATOR,
  Runtimes,
  STORES,
  TENANT,
  callIdsOf,
  codeOf,
  doomedConnection,
  eventTypes,
  keyOf,
  scriptedAgent,
  startAndDrive,
  summary,
  toolResultsIn,
  untilLeaseExpired,
  type OpenedStore,
  recoverWhenLanded,
} from './fixtures.js';
import { CREDIT, FakeDownstream, issueCredit } from './tools.js';

/*
 * Approvals: an `external({ approval: true })` call waits in `awaiting_approval` for an operator;
 * the approval is bound to that one call's arguments digest and consumed by its reservation, once.
 * A rejection (reason required) is what the model hears; nothing carries over to another call.
 */

const BIGGER = { accountId: 'acct_7', amountCents: 5000 };

describe.each(STORES)('approvals on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  beforeAll(async () => {
    opened = await open('runs_approvals');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  it('waits for an approval bound to the arguments digest; once approved the call runs once, and a replay neither runs nor asks again', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { approval: true });
    const { agent, model } = scriptedAgent(
      [{ toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] }, { text: 'Credited.' }],
      [credit],
    );
    const runtime = runtimes.open(store, [agent]);

    const waiting = await startAndDrive(runtime, 'Credit acct_7 $25.');
    const [id] = callIdsOf(waiting);
    const key = keyOf(waiting, id ?? '');

    expect(waiting.status).toBe('awaiting_approval');
    expect(waiting.statusReason).toBe(`waiting for an operator to approve or reject ${key}`);
    expect(await store.runs.approvalsOfRun(TENANT, waiting.runId)).toMatchObject([
      {
        idempotencyKey: key,
        toolName: 'issue_credit',
        args: CREDIT,
        argsDigest: argsDigest(CREDIT),
        status: 'pending',
      },
    ]);
    expect(await store.ledger.get(TENANT, key)).toBeUndefined();
    expect(credit.executions).toEqual([]);
    // Nothing drives a waiting run: drive and recover leave it be.
    expect((await runtime.drive(TENANT, waiting.runId)).status).toBe('awaiting_approval');
    expect(await runtime.recover()).toEqual([]);

    const approved = await runtime.approve({ tenantId: TENANT, idempotencyKey: key, actorId: OPERATOR });
    expect(approved).toMatchObject({ status: 'approved', decidedBy: OPERATOR });
    expect((await runtime.getRun(TENANT, waiting.runId)).status).toBe('queued');

    const done = await runtime.drive(TENANT, waiting.runId);
    expect(done.status).toBe('completed');
    expect(credit.executions).toEqual([key]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
    expect((await store.runs.getApproval(TENANT, key))?.status).toBe('consumed');
    expect(toolResultsIn(model.received[1]).map((h) => h.output)).toEqual([
      { type: 'json', value: { status: 'completed', result: { receipt: 'rcpt_1', ...CREDIT } } },
    ]);

    expect(await runtime.recover()).toEqual([]);
    expect(credit.executions).toHaveLength(1);
    expect(await store.runs.approvalsOfRun(TENANT, waiting.runId)).toHaveLength(1);
    const types = await eventTypes(store, waiting.runId);
    expect(types.filter((t) => t === 'approval.requested')).toHaveLength(1);
    expect(types.filter((t) => t === 'approval.decided')).toHaveLength(1);
  });

  it('runs an approved call once when its driver dies after the effect and the step is replayed', async () => {
    const downstream = new FakeDownstream();
    const doomedDb = await doomedConnection(opened, runtimes);
    const credit = issueCredit(downstream, {
      approval: true,
      reconcile: true,
      // The worker loses its database right after the effect: its outcome is never recorded.
      after: async () => {
        await doomedDb.loseIfArmed();
      },
    });
    const { agent, model } = scriptedAgent(
      [{ toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] }, { text: 'Credited.' }],
      [credit],
    );
    const runtime = runtimes.open(store, [agent], { owner: 'survivor' });
    const doomed = runtimes.open(doomedDb.store, [agent], { owner: 'doomed', leaseMs: 300 });

    const waiting = await startAndDrive(runtime, 'Credit acct_7 $25.');
    const key = keyOf(waiting, callIdsOf(waiting)[0] ?? '');
    await runtime.approve({ tenantId: TENANT, idempotencyKey: key, actorId: OPERATOR });
    doomedDb.arm(true);
    await expect(doomed.drive(TENANT, waiting.runId)).rejects.toThrow();
    doomedDb.arm(false);
    expect((await store.ledger.get(TENANT, key))?.status).toBe('started');
    expect((await store.runs.getApproval(TENANT, key))?.status).toBe('consumed');

    await untilLeaseExpired(store, waiting.runId);
    // The dead driver's attempt is younger than its timeout: the recovery waits it out, then replays.
    const recovered = await recoverWhenLanded(runtime);

    expect(recovered.map((r) => r.end)).toEqual([{ kind: 'ended', status: 'completed' }]);
    expect(credit.executions).toEqual([key]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
    expect(summary(await store.ledger.history(TENANT, key))).toEqual([
      'transition:reserve:-->started',
      'transition:reconcile:started->completed',
    ]);
    expect(await store.runs.approvalsOfRun(TENANT, waiting.runId)).toMatchObject([{ status: 'consumed' }]);
    const types = await eventTypes(store, waiting.runId);
    expect(types.filter((t) => t === 'approval.requested')).toHaveLength(1);
    expect(toolResultsIn(model.received.at(-1)).map((h) => h.output)).toEqual([
      { type: 'json', value: { status: 'completed', result: { receipt: 'rcpt_1', ...CREDIT } } },
    ]);
  });

  it('requires a reason to reject; the model hears the rejection, and a new call with changed arguments needs its own approval', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { approval: true });
    const { agent, model } = scriptedAgent(
      [
        { toolCalls: [{ toolName: 'issue_credit', input: BIGGER }] },
        { toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] },
        { text: 'Credited $25 instead.' },
      ],
      [credit],
    );
    const runtime = runtimes.open(store, [agent]);
    const first = await startAndDrive(runtime, 'Credit acct_7.');
    const firstKey = keyOf(first, callIdsOf(first)[0] ?? '');

    const decision = { tenantId: TENANT, idempotencyKey: firstKey, actorId: OPERATOR };
    expect(await codeOf(() => runtime.reject({ ...decision, reason: '' }))).toBe('LEDGER_REASON_REQUIRED');
    expect(await codeOf(() => runtime.reject({ ...decision, reason: '   ' }))).toBe('LEDGER_REASON_REQUIRED');
    expect(await codeOf(() => runtime.reject(decision as never))).toBe('LEDGER_REASON_REQUIRED');
    expect((await store.runs.getApproval(TENANT, firstKey))?.status).toBe('pending');
    expect((await runtime.getRun(TENANT, first.runId)).status).toBe('awaiting_approval');

    await runtime.reject({ ...decision, reason: 'above the $25 limit without a manager' });
    const second = await runtime.drive(TENANT, first.runId);

    // The model heard the rejection, asked again with other arguments: that call waits for its own approval.
    expect(toolResultsIn(model.received[1]).map((h) => h.output)).toEqual([
      {
        type: 'error-json',
        value: { status: 'rejected', reason: 'above the $25 limit without a manager', note: NOTE.rejected },
      },
    ]);
    expect(second.status).toBe('awaiting_approval');
    const secondKey = keyOf(second, callIdsOf(second)[1] ?? '');
    expect(secondKey).not.toBe(firstKey);
    expect(await store.runs.approvalsOfRun(TENANT, first.runId)).toMatchObject([
      { idempotencyKey: firstKey, status: 'rejected', argsDigest: argsDigest(BIGGER) },
      { idempotencyKey: secondKey, status: 'pending', argsDigest: argsDigest(CREDIT) },
    ]);
    expect(credit.executions).toEqual([]);

    await runtime.approve({ tenantId: TENANT, idempotencyKey: secondKey, actorId: OPERATOR });
    const done = await runtime.drive(TENANT, first.runId);
    expect(done.status).toBe('completed');
    expect(credit.executions).toEqual([secondKey]);
    expect(downstream.effects()).toEqual({ [secondKey]: 1 });
    expect(await store.ledger.get(TENANT, firstKey)).toBeUndefined();
  });

  it('does not carry an approval over to a later call with changed arguments', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { approval: true });
    const { agent } = scriptedAgent(
      [
        { toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] },
        { toolCalls: [{ toolName: 'issue_credit', input: BIGGER }] },
        { text: 'Both credited.' },
      ],
      [credit],
    );
    const runtime = runtimes.open(store, [agent]);
    const first = await startAndDrive(runtime, 'Credit acct_7 $25, then $50.');
    const firstKey = keyOf(first, callIdsOf(first)[0] ?? '');
    await runtime.approve({ tenantId: TENANT, idempotencyKey: firstKey, actorId: OPERATOR });

    const second = await runtime.drive(TENANT, first.runId);

    expect(second.status).toBe('awaiting_approval');
    expect(credit.executions).toEqual([firstKey]);
    const secondKey = keyOf(second, callIdsOf(second)[1] ?? '');
    expect(await store.runs.getApproval(TENANT, secondKey)).toMatchObject({
      status: 'pending',
      args: BIGGER,
      argsDigest: argsDigest(BIGGER),
    });
    expect(await store.ledger.get(TENANT, secondKey)).toBeUndefined();

    await runtime.approve({ tenantId: TENANT, idempotencyKey: secondKey, actorId: OPERATOR });
    expect((await runtime.drive(TENANT, first.runId)).status).toBe('completed');
    expect(downstream.effects()).toEqual({ [firstKey]: 1, [secondKey]: 1 });
  });

  it('binds an approval to the arguments digest: a call that parses to other arguments after a deploy is not run', async () => {
    const downstream = new FakeDownstream();
    const before = issueCredit(downstream, { approval: true });
    // The new version of the tool fills in a currency: the same input now makes other arguments.
    const after = issueCredit(downstream, { approval: true, currency: 'usd' });
    const old = scriptedAgent([{ toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] }], [before]);
    const { agent, model } = scriptedAgent([{ text: 'unused' }, { text: 'Not credited.' }], [after], {
      name: old.agent.name,
    });
    const waiting = await startAndDrive(runtimes.open(store, [old.agent]), 'Credit acct_7 $25.');
    const key = keyOf(waiting, callIdsOf(waiting)[0] ?? '');
    await runtimes
      .open(store, [old.agent])
      .approve({ tenantId: TENANT, idempotencyKey: key, actorId: OPERATOR });

    const done = await runtimes.open(store, [agent]).drive(TENANT, waiting.runId);

    expect(done.status).toBe('completed');
    expect(toolResultsIn(model.received[0]).map((h) => h.output)).toEqual([
      {
        type: 'error-json',
        value: {
          status: 'rejected',
          reason: 'the approval was given for other arguments than this call has',
          note: NOTE.rejected,
        },
      },
    ]);
    expect(await store.runs.getApproval(TENANT, key)).toMatchObject({
      status: 'approved',
      argsDigest: argsDigest(CREDIT),
    });
    expect(await store.ledger.get(TENANT, key)).toBeUndefined();
    expect(before.executions).toEqual([]);
    expect(after.executions).toEqual([]);
  });

  it('lets exactly one of two concurrent decisions win (APPROVAL_ALREADY_DECIDED)', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { approval: true });
    const { agent, model } = scriptedAgent(
      [{ toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] }, { text: 'Settled.' }],
      [credit],
    );
    const other = await opened.openPeer();
    try {
      const runtime = runtimes.open(store, [agent], { owner: 'api-a' });
      const second = runtimes.open(other.store, [agent], { owner: 'api-b' });
      const waiting = await startAndDrive(runtime, 'Credit acct_7 $25.');
      const key = keyOf(waiting, callIdsOf(waiting)[0] ?? '');

      const decisions = await Promise.allSettled([
        runtime.approve({ tenantId: TENANT, idempotencyKey: key, actorId: 'ops-a' }),
        second.reject({
          tenantId: TENANT,
          idempotencyKey: key,
          actorId: 'ops-b',
          reason: 'duplicate request',
        }),
      ]);

      const won = decisions.filter((d) => d.status === 'fulfilled');
      const lost = decisions.filter((d) => d.status === 'rejected');
      expect(won).toHaveLength(1);
      expect(lost).toHaveLength(1);
      expect((lost[0]?.reason as { code?: string }).code).toBe('APPROVAL_ALREADY_DECIDED');
      const approval = await store.runs.getApproval(TENANT, key);
      const winner = won[0]?.value;
      expect(approval).toMatchObject({ status: winner?.status, decidedBy: winner?.decidedBy });
      const decided = (await store.runs.events(TENANT, waiting.runId, 0, 100)).filter(
        (e) => e.type === 'approval.decided',
      );
      expect(decided).toHaveLength(1);

      const done = await runtime.drive(TENANT, waiting.runId);
      expect(done.status).toBe('completed');
      const heard = toolResultsIn(model.received[1]).map(
        (h) => (h.output as { value: { status: string } }).value,
      );
      if (winner?.status === 'approved') {
        expect((await store.runs.getApproval(TENANT, key))?.status).toBe('consumed');
        expect(credit.executions).toEqual([key]);
        expect(heard).toMatchObject([{ status: 'completed' }]);
      } else {
        expect(approval?.status).toBe('rejected');
        expect(credit.executions).toEqual([]);
        expect(heard).toMatchObject([{ status: 'rejected', reason: 'duplicate request' }]);
      }
    } finally {
      await runtimes.closeAll();
      await other.close();
    }
  });

  it('refuses decisions on a cancelled run (RUN_ALREADY_FINAL), and nothing runs', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { approval: true });
    const { agent } = scriptedAgent([{ toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] }], [credit]);
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Credit acct_7 $25.');
    const key = keyOf(waiting, callIdsOf(waiting)[0] ?? '');

    await runtime.cancel(TENANT, waiting.runId, { reason: 'customer withdrew', actorId: OPERATOR });
    expect(
      await codeOf(() => runtime.approve({ tenantId: TENANT, idempotencyKey: key, actorId: OPERATOR })),
    ).toBe('RUN_ALREADY_FINAL');
    expect((await store.runs.getApproval(TENANT, key))?.status).toBe('pending');
    expect(await runtime.recover()).toEqual([]);
    expect((await runtime.drive(TENANT, waiting.runId)).status).toBe('cancelled');
    expect(credit.executions).toEqual([]);
  });
});
