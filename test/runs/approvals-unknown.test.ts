import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.js';
import {
  OPERATOR,
  Runtimes,
  STORES,
  TENANT,
  callIdsOf,
  eventTypes,
  keyOf,
  scriptedAgent,
  startAndDrive,
  toolResultsIn,
  type OpenedStore,
  creditAndOwnerKeys,
} from './fixtures.js';
import { CREDIT, OWNER, changeOwner, creditAndOwnerSteps, FakeDownstream, issueCredit } from './tools.js';

/*
 * A step with both a call that needs approval and a write whose outcome is unknown: the approval is
 * asked for (and announced) once, with the checkpoint that waits for it, and the run goes on only
 * once both are settled, in either order.
 */

describe.each(STORES)('approvals with unknown calls on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  beforeAll(async () => {
    opened = await open('runs_approvals_unknown');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  it('announces an approval once, when it is asked for, even when a reconcile hook is asked in the same step', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { approval: true });
    const owner = changeOwner(downstream, { applies: true, reconcile: true });
    const { agent, model } = scriptedAgent(creditAndOwnerSteps('Done.'), [credit, owner], {
      onIndeterminate: 'pause',
    });
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Credit acct_7 and give it to dana.');
    const [creditId, ownerId] = callIdsOf(waiting);
    const creditKey = keyOf(waiting, creditId ?? '');

    expect(waiting.status).toBe('awaiting_approval');
    expect(waiting.checkpoint.pending?.calls.map((c) => c.heard?.kind)).toEqual([undefined, 'completed']);
    const requested = (await store.runs.events(TENANT, waiting.runId, 0, 100)).filter(
      (e) => e.type === 'approval.requested',
    );
    expect(requested.map((e) => e.data)).toEqual([{ key: creditKey, toolName: 'issue_credit' }]);
    expect(await store.runs.approvalsOfRun(TENANT, waiting.runId)).toHaveLength(1);

    await runtime.approve({ tenantId: TENANT, idempotencyKey: creditKey, actorId: OPERATOR });
    expect((await runtime.drive(TENANT, waiting.runId)).status).toBe('completed');
    expect(
      toolResultsIn(model.received[1]).map((h) => [h.toolCallId, (h.output as { type: string }).type]),
    ).toEqual([
      [creditId, 'json'],
      [ownerId, 'json'],
    ]);
    expect(credit.executions).toEqual([creditKey]);
    expect(owner.executions).toHaveLength(1);
  });

  it('announces no approval for a run that fails on an unknown call in the same step', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { approval: true });
    const owner = changeOwner(downstream, { applies: true });
    const { agent } = scriptedAgent(
      [
        {
          toolCalls: [
            { toolName: 'issue_credit', input: CREDIT },
            { toolName: 'change_owner', input: OWNER },
          ],
        },
      ],
      [credit, owner],
    );
    const run = await startAndDrive(runtimes.open(store, [agent]), 'Credit acct_7 and give it to dana.');

    expect(run.status).toBe('failed');
    expect(run.error?.code).toBe('RUN_CALL_UNKNOWN');
    expect(await store.runs.approvalsOfRun(TENANT, run.runId)).toEqual([]);
    expect(await eventTypes(store, run.runId)).not.toContain('approval.requested');
  });

  it('waits for both an unknown call and an approval of one step, whichever is settled first', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { approval: true });
    const owner = changeOwner(downstream, { applies: false });
    const { agent, model } = scriptedAgent(creditAndOwnerSteps('Done.'), [credit, owner], {
      onIndeterminate: 'pause',
    });
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Credit acct_7 and give it to dana.');
    const [creditKey, ownerKey] = creditAndOwnerKeys(waiting);
    expect(waiting.status).toBe('awaiting_reconciliation');
    expect(await store.runs.approvalsOfRun(TENANT, waiting.runId)).toMatchObject([{ status: 'pending' }]);

    // Approved first: the run still waits for the unknown call.
    await runtime.approve({ tenantId: TENANT, idempotencyKey: creditKey, actorId: OPERATOR });
    expect((await runtime.getRun(TENANT, waiting.runId)).status).toBe('awaiting_reconciliation');
    expect(credit.executions).toEqual([]);
    await runtime.resolve({
      tenantId: TENANT,
      idempotencyKey: ownerKey,
      status: 'failed',
      reason: 'not in the CRM',
      actorId: OPERATOR,
    });
    const done = await runtime.drive(TENANT, waiting.runId);

    expect(done.status).toBe('completed');
    expect(credit.executions).toEqual([creditKey]);
    expect(owner.executions).toEqual([ownerKey]);
    expect(
      toolResultsIn(model.received[1]).map((h) => (h.output as { value: { status: string } }).value.status),
    ).toEqual(['completed', 'did_not_take_effect']);
  });
});
