import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.js';
import {
  NOTE,
  OPERATOR,
  Runtimes,
  STORES,
  TENANT,
  callIdsOf,
  deferred,
  keyOf,
  scriptedAgent,
  seedDeadWorkerStep,
  startAndDrive,
  toolResultsIn,
  waitFor,
  type OpenedStore,
  creditAndOwnerKeys,
} from './fixtures.js';
import {
  CREDIT,
  changeOwner,
  creditAndOwnerSteps,
  deleteRecord,
  FakeDownstream,
  issueCredit,
  lookupOrder,
  OWNER,
} from './tools.js';

/*
 * What the model hears: the exact tool-result outputs in the prompts the scripted model received,
 * for every kind of settlement. The model is never told "failed" about a call whose outcome is
 * unknown; while one is, the model is not called at all.
 */

describe.each(STORES)('what the model hears on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  beforeAll(async () => {
    opened = await open('runs_heard');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  it('hears completed, not_attempted, read_failed and invalid_call, in the order of the calls', async () => {
    const downstream = new FakeDownstream();
    const lookup = lookupOrder({ fail: 'orders database unavailable' });
    const credit = issueCredit(downstream);
    const refund = issueCredit(downstream, {
      name: 'issue_refund',
      notAttempted: 'the billing token expired',
    });
    const { agent, model } = scriptedAgent(
      [
        {
          toolCalls: [
            { toolName: 'issue_credit', input: CREDIT },
            { toolName: 'issue_refund', input: CREDIT },
            { toolName: 'lookup_order', input: { orderId: 'ord_1' } },
            { toolName: 'refund_everything', input: {} },
            { toolName: 'issue_credit', input: { accountId: 'acct_7', amountCents: -5 } },
            { toolName: 'issue_credit', rawInput: '{"accountId": "acct_7", ' },
          ],
        },
        { text: 'Done what I could.' },
      ],
      [lookup, credit, refund],
    );

    const run = await startAndDrive(runtimes.open(store, [agent]), 'Help.');

    expect(run.status).toBe('completed');
    const ids = callIdsOf(run);
    expect(model.received).toHaveLength(2);
    const heard = toolResultsIn(model.received[1]);
    expect(heard.map((h) => h.toolCallId)).toEqual(ids);
    expect(heard.map((h) => h.output)).toEqual([
      { type: 'json', value: { status: 'completed', result: { receipt: 'rcpt_1', ...CREDIT } } },
      {
        type: 'error-json',
        value: { status: 'not_attempted', error: 'the billing token expired', note: NOTE.notAttempted },
      },
      {
        type: 'error-json',
        value: {
          status: 'failed',
          error: 'read failed after 2 tries: orders database unavailable',
          note: NOTE.readFailed,
        },
      },
      {
        type: 'error-json',
        value: {
          status: 'invalid_call',
          error:
            'there is no tool named "refund_everything"; the tools are: lookup_order, issue_credit, issue_refund',
          note: NOTE.invalidCall,
        },
      },
      {
        type: 'error-json',
        value: {
          status: 'invalid_call',
          error:
            'arguments for tool "issue_credit" are not valid: amountCents: Too small: expected number to be >0',
          note: NOTE.invalidCall,
        },
      },
      {
        type: 'error-json',
        value: {
          status: 'invalid_call',
          error: 'the input for tool "issue_credit" is not valid JSON',
          note: NOTE.invalidCall,
        },
      },
    ]);
    // Only the valid calls reached the ledger; the one refused before sending ran once, and may run again.
    const records = await store.ledger.list(TENANT, { runId: run.runId, limit: 10 });
    expect(records.map((r) => [r.toolName, r.status]).sort()).toEqual([
      ['issue_credit', 'completed'],
      ['issue_refund', 'failed'],
      ['lookup_order', 'failed'],
    ]);
    expect(lookup.executions).toHaveLength(2); // a read is tried again, within its attempts
    expect(refund.executions).toHaveLength(1);
    expect(downstream.effects()).toEqual({ [keyOf(run, ids[0] ?? '')]: 1 });
  });

  it('hears compensated and did_not_take_effect after a paused step is settled, and nothing while it waits', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { compensate: true });
    const owner = changeOwner(downstream, { applies: false });
    const { agent, model } = scriptedAgent(creditAndOwnerSteps('Noted.'), [credit, owner], {
      onIndeterminate: 'pause',
    });
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Credit acct_7 and give it to dana.');
    const [creditKey, ownerKey] = creditAndOwnerKeys(waiting);

    expect(waiting.status).toBe('awaiting_reconciliation');
    expect(model.received).toHaveLength(1);

    // While the run waits, an operator undoes the credit and finds the owner change never happened.
    const undone = await runtime.compensate({
      tenantId: TENANT,
      idempotencyKey: creditKey,
      reason: 'credited the wrong account',
      actorId: OPERATOR,
    });
    expect(undone.status).toBe('compensated');
    expect((await runtime.getRun(TENANT, waiting.runId)).status).toBe('awaiting_reconciliation');
    await runtime.resolve({
      tenantId: TENANT,
      idempotencyKey: ownerKey,
      status: 'failed',
      reason: 'no owner change in the CRM audit log',
      actorId: OPERATOR,
    });
    expect((await runtime.getRun(TENANT, waiting.runId)).status).toBe('queued');
    const done = await runtime.drive(TENANT, waiting.runId);

    expect(done.status).toBe('completed');
    expect(model.received).toHaveLength(2);
    expect(toolResultsIn(model.received[1])).toEqual([
      {
        toolCallId: creditKey.split(':')[1],
        toolName: 'issue_credit',
        output: {
          type: 'json',
          value: {
            status: 'compensated',
            result: { receipt: 'rcpt_1', ...CREDIT },
            reason: 'credited the wrong account',
            note: NOTE.compensated,
          },
        },
      },
      {
        toolCallId: ownerKey.split(':')[1],
        toolName: 'change_owner',
        output: {
          type: 'error-json',
          value: {
            status: 'did_not_take_effect',
            reason: 'no owner change in the CRM audit log',
            settled_by: `operator ${OPERATOR}`,
            note: NOTE.didNotTakeEffect,
          },
        },
      },
    ]);
    expect(JSON.stringify(model.received)).not.toContain('"status":"failed"');
    expect(credit.executions).toEqual([creditKey]);
    expect(owner.executions).toEqual([ownerKey]);
    expect(downstream.undone.get(creditKey)).toBe(1);
  });

  it('hears compensated about a completed call undone while its step waited for an approval', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { compensate: true });
    const remove = deleteRecord(downstream);
    const { agent, model } = scriptedAgent(
      [
        {
          toolCalls: [
            { toolName: 'issue_credit', input: CREDIT },
            { toolName: 'delete_record', input: { recordId: 'cus_9' } },
          ],
        },
        { text: 'Done.' },
      ],
      [credit, remove],
    );
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Credit acct_7, then delete cus_9.');
    const [creditId, removeId] = callIdsOf(waiting);
    const creditKey = keyOf(waiting, creditId ?? '');
    expect(waiting.status).toBe('awaiting_approval');

    await runtime.compensate({
      tenantId: TENANT,
      idempotencyKey: creditKey,
      reason: 'duplicate of an earlier credit',
      actorId: OPERATOR,
    });
    expect((await runtime.getRun(TENANT, waiting.runId)).status).toBe('awaiting_approval');
    await runtime.approve({
      tenantId: TENANT,
      idempotencyKey: keyOf(waiting, removeId ?? ''),
      actorId: OPERATOR,
    });
    expect((await runtime.drive(TENANT, waiting.runId)).status).toBe('completed');

    expect(toolResultsIn(model.received[1]).map((h) => [h.toolCallId, h.output])).toEqual([
      [
        creditId,
        {
          type: 'json',
          value: {
            status: 'compensated',
            result: { receipt: 'rcpt_1', ...CREDIT },
            reason: 'duplicate of an earlier credit',
            note: NOTE.compensated,
          },
        },
      ],
      [
        removeId,
        { type: 'json', value: { status: 'completed', result: { receipt: 'rcpt_2', deleted: 'cus_9' } } },
      ],
    ]);
    expect(credit.executions).toEqual([creditKey]);
    expect(downstream.undone.get(creditKey)).toBe(1);
  });

  it('hears replayed for calls a dead worker had completed; the tools do not run again', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const lookup = lookupOrder();
    const { agent, model } = scriptedAgent([{ text: 'unused' }, { text: 'All done.' }], [lookup, credit]);
    const runtime = runtimes.open(store, [agent]);
    const seeded = await seedDeadWorkerStep(
      runtime,
      agent.name,
      [
        { tool: lookup.tool, input: { orderId: 'ord_1' } },
        { tool: credit.tool, input: CREDIT },
      ],
      { execute: true },
    );

    const recovered = await runtime.recover();

    expect(recovered.map((r) => [r.runId, r.end])).toEqual([
      [seeded.runId, { kind: 'ended', status: 'completed' }],
    ]);
    expect(toolResultsIn(model.received[0])).toEqual([
      {
        toolCallId: seeded.toolCallIds[0],
        toolName: 'lookup_order',
        output: {
          type: 'json',
          value: {
            status: 'completed',
            result: { orderId: 'ord_1', status: 'delivered', amountCents: 2500 },
            note: NOTE.replayed,
          },
        },
      },
      {
        toolCallId: seeded.toolCallIds[1],
        toolName: 'issue_credit',
        output: {
          type: 'json',
          value: { status: 'completed', result: { receipt: 'rcpt_1', ...CREDIT }, note: NOTE.replayed },
        },
      },
    ]);
    expect(lookup.executions).toHaveLength(1);
    expect(credit.executions).toHaveLength(1);
    expect(downstream.effects()).toEqual({ [seeded.keys[1] ?? '']: 1 });
  });

  it('hears a rejection with the operator’s reason', async () => {
    const downstream = new FakeDownstream();
    const remove = deleteRecord(downstream);
    const { agent, model } = scriptedAgent(
      [
        { toolCalls: [{ toolName: 'delete_record', input: { recordId: 'cus_9' } }] },
        { text: 'Not deleted.' },
      ],
      [remove],
    );
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Delete cus_9.');
    const [id] = callIdsOf(waiting);
    await runtime.reject({
      tenantId: TENANT,
      idempotencyKey: keyOf(waiting, id ?? ''),
      actorId: OPERATOR,
      reason: 'legal hold on this customer',
    });
    const done = await runtime.drive(TENANT, waiting.runId);

    expect(done.status).toBe('completed');
    expect(toolResultsIn(model.received[1])).toEqual([
      {
        toolCallId: id,
        toolName: 'delete_record',
        output: {
          type: 'error-json',
          value: { status: 'rejected', reason: 'legal hold on this customer', note: NOTE.rejected },
        },
      },
    ]);
    expect(remove.executions).toEqual([]);
    expect(await store.ledger.list(TENANT, { runId: waiting.runId, limit: 10 })).toEqual([]);
  });

  it('hears an operator’s completed without a result as completed, with the reference and the reason, never a bare null', async () => {
    const downstream = new FakeDownstream();
    const owner = changeOwner(downstream, { applies: true });
    const { agent, model } = scriptedAgent(
      [{ toolCalls: [{ toolName: 'change_owner', input: OWNER }] }, { text: 'Done.' }],
      [owner],
      { onIndeterminate: 'pause' },
    );
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Give acct_7 to dana.');
    expect(waiting.status).toBe('awaiting_reconciliation');
    const [id] = callIdsOf(waiting);
    const key = keyOf(waiting, id ?? '');

    // What an operator usually has: the downstream reference, not the tool's result.
    await runtime.resolve({
      tenantId: TENANT,
      idempotencyKey: key,
      status: 'completed',
      reason: 'the CRM audit log shows the owner change',
      resultReference: 'crm_audit_991',
      actorId: OPERATOR,
    });
    const done = await runtime.drive(TENANT, waiting.runId);

    expect(done.status).toBe('completed');
    expect(model.received).toHaveLength(2);
    expect(toolResultsIn(model.received[1])).toEqual([
      {
        toolCallId: id,
        toolName: 'change_owner',
        output: {
          type: 'json',
          value: {
            status: 'completed',
            result: null,
            result_reference: 'crm_audit_991',
            settled_by: `operator ${OPERATOR}`,
            reason: 'the CRM audit log shows the owner change',
            note: NOTE.settledCompleted,
          },
        },
      },
    ]);
    expect(owner.executions).toEqual([key]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
  });

  it('corrects the model at its next step when a call it was told did not take effect lands after all (a conflict)', async () => {
    const downstream = new FakeDownstream();
    const landing = deferred();
    // Times out (indeterminate), then its effect lands when released: a late outcome.
    const owner = changeOwner(downstream, { applies: false, release: landing.promise });
    const lookup = lookupOrder();
    let key = '';
    const { agent, model } = scriptedAgent(
      async (_prompt, turn) => {
        if (turn === 0) return { toolCalls: [{ toolName: 'change_owner', input: OWNER }] };
        if (turn === 1) {
          // The model was just told "did not take effect"; now the attempt's effect lands.
          landing.resolve();
          await waitFor(async () => (await store.ledger.get(TENANT, key))?.conflictAt != null);
          return { toolCalls: [{ toolName: 'lookup_order', input: { orderId: 'o_1' } }] };
        }
        if (turn === 2) return { toolCalls: [{ toolName: 'lookup_order', input: { orderId: 'o_2' } }] };
        return { text: 'Corrected.' };
      },
      [owner, lookup],
      { onIndeterminate: 'pause' },
    );
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Give acct_7 to dana.');
    expect(waiting.status).toBe('awaiting_reconciliation');
    const [id] = callIdsOf(waiting);
    key = keyOf(waiting, id ?? '');
    await runtime.resolve({
      tenantId: TENANT,
      idempotencyKey: key,
      status: 'failed',
      reason: 'nothing in the CRM audit log yet',
      actorId: OPERATOR,
      force: true, // its request may still land: settling it failed takes force
    });
    const done = await runtime.drive(TENANT, waiting.runId);

    expect(done.status).toBe('completed');
    expect(model.received).toHaveLength(4);
    // Step 2 heard "did not take effect", as the ledger stood then.
    expect(toolResultsIn(model.received[1])[0]?.output).toMatchObject({
      type: 'error-json',
      value: { status: 'did_not_take_effect', settled_by: `operator ${OPERATOR}` },
    });
    const record = await store.ledger.get(TENANT, key);
    expect(record).toMatchObject({ status: 'failed', settledBy: { kind: 'operator', id: OPERATOR } });
    expect(record?.conflictAt).not.toBeNull();
    expect(downstream.effects()).toEqual({ [key]: 1 });

    // Step 3 is corrected: the effect stands, with what landed; step 4 keeps that one correction.
    const corrections = (prompt: (typeof model.received)[number] | undefined) =>
      (prompt ?? []).flatMap((m) =>
        m.role === 'user'
          ? m.content.flatMap((p) => (p.type === 'text' && p.text.startsWith('Correction') ? [p.text] : []))
          : [],
      );
    expect(corrections(model.received[1])).toEqual([]);
    const [correction] = corrections(model.received[2]);
    expect(correction).toContain(`tool call ${id} (change_owner)`);
    const told = correction?.split(`tool call ${id} (change_owner): `)[1] ?? 'null';
    expect(JSON.parse(told)).toEqual({
      status: 'took_effect',
      result: { receipt: 'rcpt_1', ...OWNER },
      settled_by: `operator ${OPERATOR}`,
      reason: 'nothing in the CRM audit log yet',
      note: NOTE.tookEffect,
    });
    expect(corrections(model.received[3])).toEqual([correction]);
    expect(owner.executions).toEqual([key]);
  });
});
