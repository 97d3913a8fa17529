import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { prepareCall } from '../../src/calls/index.js';
import type { Runtime } from '../../src/runs/index.js';
import type { Store } from '../../src/store/index.js';
import type { ReconcileHook, ToolContext } from '../../src/tools/index.js';
import {
  OPERATOR,
  Runtimes,
  STORES,
  TENANT,
  codeOf,
  deferred,
  newRunId,
  scriptedAgent,
  seedDeadWorkerStep,
  startAndDrive,
  summary,
  waitFor,
  type OpenedStore,
  creditAndOwnerKeys,
} from './fixtures.js';
import { CREDIT, OWNER, changeOwner, creditAndOwnerSteps, FakeDownstream, issueCredit } from './tools.js';

/*
 * Cancellation stops a run and never compensates. A driver still working on a cancelled run stands
 * down: its lease epoch is stale, so its checkpoint writes change nothing, while what its tools did
 * is still recorded truthfully in the ledger.
 */

const LEASE_MS = 1_000;

describe.each(STORES)('cancellation on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  beforeAll(async () => {
    opened = await open('runs_cancel');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  it('stops a run whose write is in flight: the driver stands down, its stale writes change nothing, nothing is compensated', async () => {
    const downstream = new FakeDownstream();
    const started = deferred<ToolContext>();
    const gate = deferred();
    const credit = issueCredit(downstream, {
      compensate: true,
      before: async (ctx) => {
        started.resolve(ctx);
        await gate.promise; // the request is slow to go out; it ignores the signal
      },
    });
    const { agent, model } = scriptedAgent(
      [{ toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] }, { text: 'unreachable' }],
      [credit],
    );
    const runtime = runtimes.open(store, [agent], { leaseMs: LEASE_MS });
    const { run } = await runtime.startRun({
      tenantId: TENANT,
      agent: agent.name,
      input: 'Credit.',
      runId: newRunId(),
    });
    const driving = runtime.drive(TENANT, run.runId);
    const ctx = await started.promise;
    const key = ctx.idempotencyKey;
    const before = await runtime.getRun(TENANT, run.runId);

    const cancelled = await runtime.cancel(TENANT, run.runId, {
      reason: 'customer closed the account',
      actorId: OPERATOR,
    });
    expect(cancelled).toMatchObject({
      status: 'cancelled',
      leaseEpoch: before.leaseEpoch + 1,
      leaseOwner: null,
    });
    const eventsAtCancel = await store.runs.events(TENANT, run.runId, 0, 100);

    await waitFor(() => ctx.signal.aborted); // the driver noticed at its next renewal and told the tool
    gate.resolve();
    const after = await driving;
    await runtime.ledger.drain();

    expect(after).toMatchObject({
      status: 'cancelled',
      statusReason: 'customer closed the account',
      checkpointVersion: before.checkpointVersion,
      checkpoint: before.checkpoint,
    });
    expect(await store.runs.events(TENANT, run.runId, 0, 100)).toEqual(eventsAtCancel);
    expect(eventsAtCancel.at(-1)).toMatchObject({
      type: 'run.status',
      data: { status: 'cancelled', reason: 'customer closed the account', actor: OPERATOR },
    });
    // A write fenced by the old epoch changes nothing.
    const stale = { tenantId: TENANT, runId: run.runId, leaseEpoch: before.leaseEpoch };
    expect(await store.runs.renewLease(stale, runtime.owner, LEASE_MS)).toBe(false);
    expect(
      await store.runs.saveCheckpoint({
        fence: { ...stale, checkpointVersion: before.checkpointVersion },
        checkpoint: { ...before.checkpoint, step: 9 },
        storedMessages: before.checkpoint.messages.length,
        status: 'completed',
      }),
    ).toBeUndefined();
    expect(await runtime.getRun(TENANT, run.runId)).toMatchObject({
      status: 'cancelled',
      checkpoint: before.checkpoint,
    });

    // The request did go out: the ledger says so (the late answer), and nobody undid it.
    expect(summary(await store.ledger.history(TENANT, key))).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->indeterminate',
      'transition:outcome:indeterminate->completed',
    ]);
    expect(await store.ledger.get(TENANT, `${key}:compensation`)).toBeUndefined();
    expect(downstream.effects()).toEqual({ [key]: 1 });
    expect(downstream.undone.size).toBe(0);
    expect(credit.executions).toEqual([key]);
    expect(model.received).toHaveLength(1);
    expect(await runtime.recover()).toEqual([]);
  });

  it('stops a run during its model call: the response is never checkpointed and no tool runs', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const asked = deferred();
    const gate = deferred();
    const { agent, model } = scriptedAgent(async () => {
      asked.resolve();
      await gate.promise;
      return { toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] };
    }, [credit]);
    const runtime = runtimes.open(store, [agent], { leaseMs: LEASE_MS });
    const { run } = await runtime.startRun({
      tenantId: TENANT,
      agent: agent.name,
      input: 'Credit.',
      runId: newRunId(),
    });
    const driving = runtime.drive(TENANT, run.runId);
    await asked.promise;

    await runtime.cancel(TENANT, run.runId, { reason: 'wrong customer', actorId: OPERATOR });
    gate.resolve();
    const after = await driving;

    expect(after).toMatchObject({ status: 'cancelled', checkpointVersion: run.checkpointVersion });
    expect(after.checkpoint).toEqual(run.checkpoint);
    expect(credit.executions).toEqual([]);
    expect(await store.ledger.list(TENANT, { runId: run.runId, limit: 10 })).toEqual([]);
    expect(model.received).toHaveLength(1);
  });

  it('records what a call in hand came to when another call of its step finds the run cancelled', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const target: { runtime?: Runtime; runId: string } = { runId: '' };
    // While the recovering worker asks about the unknown write, an operator cancels the run.
    const cancelWhileAsked: ReconcileHook = async () => {
      await waitFor(() => credit.executions.length === 1 && Object.keys(downstream.effects()).length === 1);
      await target.runtime?.cancel(TENANT, target.runId, { reason: 'customer left', actorId: OPERATOR });
      return { status: 'failed', reason: 'not in the CRM' };
    };
    const owner = changeOwner(downstream, { applies: false, reconcile: cancelWhileAsked });
    const { agent, model } = scriptedAgent([{ text: 'unused' }], [credit, owner]);
    const runtime = runtimes.open(store, [agent]);
    target.runtime = runtime;
    const seeded = await seedDeadWorkerStep(
      runtime,
      agent.name,
      [
        { tool: credit.tool, input: CREDIT },
        { tool: owner.tool, input: OWNER },
      ],
      { execute: false },
    );
    const runId = seeded.runId;
    target.runId = runId;
    const [creditKey, ownerKey] = seeded.keys;
    const dead = { kind: 'runtime' as const, id: 'dead-worker' };
    const [reserved] = await store.ledger.reserve(
      [
        {
          ...prepareCall({
            tenantId: TENANT,
            runId,
            toolCallId: seeded.toolCallIds[1] ?? '',
            tool: owner.tool,
            args: OWNER,
          }).request,
          attemptTimeoutMs: 0,
        },
      ],
      dead,
    );
    await store.ledger.transition({
      tenantId: TENANT,
      idempotencyKey: ownerKey ?? '',
      via: 'outcome',
      to: 'indeterminate',
      expect: { status: 'started', version: reserved?.record.version ?? 0 },
      actor: dead,
      reason: 'timed out',
      error: { code: 'TOOL_TIMEOUT', message: 'timed out' },
      recordIgnored: false,
    });

    const recovered = await runtime.recover();

    expect(recovered.map((r) => r.end.kind)).toEqual(['stood_down']);
    expect((await runtime.getRun(TENANT, runId)).status).toBe('cancelled');
    expect(credit.executions).toEqual([creditKey]);
    expect(downstream.effects()).toEqual({ [creditKey ?? '']: 1 });
    // The credit took effect and this worker knew it: the ledger says so, rather than "started".
    expect(summary(await store.ledger.history(TENANT, creditKey ?? ''))).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->completed',
    ]);
    expect((await store.ledger.get(TENANT, ownerKey ?? ''))?.status).toBe('failed');
    expect(owner.executions).toEqual([]);
    expect(model.received).toHaveLength(0);
  });

  it('cancels a waiting run without compensating or settling anything; a cancel needs a reason and a live run', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { compensate: true });
    const owner = changeOwner(downstream, { applies: true });
    const { agent } = scriptedAgent(creditAndOwnerSteps('unreachable'), [credit, owner], {
      onIndeterminate: 'pause',
    });
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Credit acct_7 and give it to dana.');
    const [creditKey, ownerKey] = creditAndOwnerKeys(waiting);
    expect(waiting.status).toBe('awaiting_reconciliation');

    const request = { reason: 'customer withdrew', actorId: OPERATOR };
    expect(await codeOf(() => runtime.cancel(TENANT, waiting.runId, { ...request, reason: ' ' }))).toBe(
      'LEDGER_REASON_REQUIRED',
    );
    expect(
      await codeOf(() => runtime.cancel(TENANT, waiting.runId, { ...request, actorId: 'no spaces' })),
    ).toBe('LEDGER_ACTOR_INVALID');
    expect(await codeOf(() => runtime.cancel(TENANT, 'run_nope', request))).toBe('RUN_NOT_FOUND');
    expect((await runtime.cancel(TENANT, waiting.runId, request)).status).toBe('cancelled');
    expect(await codeOf(() => runtime.cancel(TENANT, waiting.runId, request))).toBe('RUN_ALREADY_FINAL');

    expect(await store.ledger.get(TENANT, creditKey)).toMatchObject({ status: 'completed' });
    expect(await store.ledger.get(TENANT, `${creditKey}:compensation`)).toBeUndefined();
    expect(await store.ledger.get(TENANT, ownerKey)).toMatchObject({ status: 'indeterminate' });
    expect(downstream.undone.size).toBe(0);

    // Settling the unknown call later is still recorded, but the run stays cancelled.
    await runtime.resolve({
      tenantId: TENANT,
      idempotencyKey: ownerKey,
      status: 'completed',
      reason: 'the CRM shows dana',
      actorId: OPERATOR,
    });
    expect(await runtime.recover()).toEqual([]);
    expect((await runtime.getRun(TENANT, waiting.runId)).status).toBe('cancelled');
    expect(credit.executions).toEqual([creditKey]);
    expect(owner.executions).toEqual([ownerKey]);
  });
});
