import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { resolveToolCall } from '../../src/calls/index.js';
import type { RunRecord } from '../../src/run-state/index.js';
import { sweepWaiting } from '../../src/runs/resume.js';
import type { Runtime } from '../../src/runs/index.js';
import type { Store } from '../../src/store/index.js';
import type { ReconcileHook } from '../../src/tools/index.js';
import {
  NOTE,
  OPERATOR,
  Runtimes,
  STORES,
  TENANT,
  callIdsOf,
  deferred,
  eventTypes,
  keyOf,
  scriptedAgent,
  startAndDrive,
  summary,
  toolResultsIn,
  type OpenedStore,
  creditAndOwnerKeys,
} from './fixtures.js';
import { OWNER, changeOwner, creditAndOwnerSteps, FakeDownstream, issueCredit } from './tools.js';

/*
 * Unknown calls: a write that times out is `indeterminate`. With `on_indeterminate: pause` the run
 * waits in `awaiting_reconciliation` until every unknown call is settled (reconcile hook, operator,
 * late outcome); with the default `fail` the run fails naming the call. The model is never called
 * while a call is unknown, never hears "failed" about one, and the tool never runs twice.
 */

const reasonFor = (key: string): string =>
  `the outcome of tool call ${key} (change_owner) is unknown: it may or may not have taken effect. ` +
  `Check the downstream system, then settle it with \`oncely executions resolve ${key} ` +
  '--status completed|failed --reason "..."` (or the tool\'s reconcile hook)';

const ownerStep = [{ toolCalls: [{ toolName: 'change_owner', input: OWNER }] }, { text: 'Done.' }];

describe.each(STORES)('unknown calls on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  beforeAll(async () => {
    opened = await open('runs_unknown');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  const onlyKey = (run: RunRecord): string => keyOf(run, callIdsOf(run)[0] ?? '');

  /** `n` runs paused on a write that never lands (the owner change, whose hook cannot tell). */
  async function pausedRuns(n: number): Promise<{ runtime: Runtime; paused: RunRecord[] }> {
    const owner = changeOwner(new FakeDownstream(), { applies: false });
    const { agent } = scriptedAgent(
      (_prompt, turn) => (turn === 0 ? (ownerStep[0] ?? { text: '' }) : { text: 'Done.' }),
      [owner],
      { onIndeterminate: 'pause' },
    );
    const runtime = runtimes.open(store, [agent]);
    const paused: RunRecord[] = [];
    for (let i = 0; i < n; i++) paused.push(await startAndDrive(runtime, `Give acct_${i} to dana.`));
    return { runtime, paused };
  }

  /** Settles a run's call where no runtime sees it (a library call in another process). */
  const settleUnseen = (runtime: Runtime, run: RunRecord) =>
    resolveToolCall(runtime.ledger, {
      tenantId: TENANT,
      idempotencyKey: onlyKey(run),
      status: 'failed',
      reason: 'not in the CRM',
      actorId: OPERATOR,
    });

  it('pauses on a timed-out write, names the call and how to settle it; an operator’s completed resumes it', async () => {
    const downstream = new FakeDownstream();
    const owner = changeOwner(downstream, { applies: true });
    const { agent, model } = scriptedAgent(ownerStep, [owner], { onIndeterminate: 'pause' });
    const runtime = runtimes.open(store, [agent]);

    const waiting = await startAndDrive(runtime, 'Give acct_7 to dana.');
    const key = onlyKey(waiting);

    expect(waiting.status).toBe('awaiting_reconciliation');
    expect(waiting.statusReason).toBe(reasonFor(key));
    expect(await store.ledger.get(TENANT, key)).toMatchObject({
      status: 'indeterminate',
      error: { code: 'TOOL_TIMEOUT' },
    });
    expect(model.received).toHaveLength(1);
    expect(await eventTypes(store, waiting.runId)).toEqual([
      'run.created',
      'run.claimed',
      'model.response',
      'tool.unknown',
      'run.status',
    ]);
    // Nothing moves it while the call is unknown and no hook can tell.
    expect((await runtime.drive(TENANT, waiting.runId)).status).toBe('awaiting_reconciliation');
    expect(await runtime.recover()).toEqual([]);
    expect(model.received).toHaveLength(1);

    await runtime.resolve({
      tenantId: TENANT,
      idempotencyKey: key,
      status: 'completed',
      reason: 'the CRM shows dana as owner',
      actorId: OPERATOR,
      result: { owner: 'dana', changedAt: '2024-05-01' },
    });
    expect((await runtime.getRun(TENANT, waiting.runId)).status).toBe('queued');
    const done = await runtime.drive(TENANT, waiting.runId);

    expect(done.status).toBe('completed');
    expect(toolResultsIn(model.received[1]).map((h) => h.output)).toEqual([
      {
        type: 'json',
        value: {
          status: 'completed',
          result: { owner: 'dana', changedAt: '2024-05-01' },
          settled_by: `operator ${OPERATOR}`,
          reason: 'the CRM shows dana as owner',
          note: NOTE.settledCompleted,
        },
      },
    ]);
    expect(owner.executions).toEqual([key]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
    expect(summary(await store.ledger.history(TENANT, key))).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->indeterminate',
      'transition:resolve:indeterminate->completed',
    ]);
  });

  it('resumes a paused run when an operator resolves the call failed; the call is not run again', async () => {
    const downstream = new FakeDownstream();
    const owner = changeOwner(downstream, { applies: false });
    const { agent, model } = scriptedAgent(ownerStep, [owner], { onIndeterminate: 'pause' });
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Give acct_7 to dana.');
    const key = onlyKey(waiting);

    await runtime.resolve({
      tenantId: TENANT,
      idempotencyKey: key,
      status: 'failed',
      reason: 'the CRM never received it',
      actorId: OPERATOR,
    });
    const done = await runtime.drive(TENANT, waiting.runId);

    expect(done.status).toBe('completed');
    expect(toolResultsIn(model.received[1]).map((h) => h.output)).toEqual([
      {
        type: 'error-json',
        value: {
          status: 'did_not_take_effect',
          reason: 'the CRM never received it',
          settled_by: `operator ${OPERATOR}`,
          note: NOTE.didNotTakeEffect,
        },
      },
    ]);
    expect(owner.executions).toEqual([key]);
    expect(await store.ledger.get(TENANT, key)).toMatchObject({ status: 'failed', attempt: 1 });
  });

  it('settles an unknown call with the reconcile hook in the same drive: the model hears completed as if no timeout happened', async () => {
    const downstream = new FakeDownstream();
    const owner = changeOwner(downstream, { applies: true, reconcile: true });
    const { agent, model } = scriptedAgent(ownerStep, [owner], { onIndeterminate: 'pause' });
    const run = await startAndDrive(runtimes.open(store, [agent]), 'Give acct_7 to dana.');
    const key = onlyKey(run);

    expect(run.status).toBe('completed');
    expect(toolResultsIn(model.received[1]).map((h) => h.output)).toEqual([
      { type: 'json', value: { status: 'completed', result: { receipt: 'rcpt_1', ...OWNER } } },
    ]);
    expect(summary(await store.ledger.history(TENANT, key))).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->indeterminate',
      'transition:reconcile:indeterminate->completed',
    ]);
    const statuses = (await store.runs.events(TENANT, run.runId, 0, 100))
      .filter((e) => e.type === 'run.status')
      .map((e) => (e.data as { status: string }).status);
    expect(statuses).toEqual(['completed']);
    expect(owner.executions).toEqual([key]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
  });

  it('runs a call again with the same key when the reconcile hook finds it did not take effect', async () => {
    const downstream = new FakeDownstream();
    const owner = changeOwner(downstream, { applies: false, reconcile: true, answersFrom: 2 });
    const { agent, model } = scriptedAgent(ownerStep, [owner], { onIndeterminate: 'pause' });
    const run = await startAndDrive(runtimes.open(store, [agent]), 'Give acct_7 to dana.');
    const key = onlyKey(run);

    expect(run.status).toBe('completed');
    expect(owner.executions).toEqual([key, key]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
    expect(await store.ledger.get(TENANT, key)).toMatchObject({ status: 'completed', attempt: 2 });
    expect(summary(await store.ledger.history(TENANT, key))).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->indeterminate',
      'transition:reconcile:indeterminate->failed',
      'transition:reserve:failed->started',
      'transition:outcome:started->completed',
    ]);
    expect(toolResultsIn(model.received[1]).map((h) => h.output)).toEqual([
      { type: 'json', value: { status: 'completed', result: { receipt: 'rcpt_1', ...OWNER } } },
    ]);
  });

  it('fails the run by default (RUN_CALL_UNKNOWN), naming the call; the model is not called again and nothing is undone', async () => {
    const downstream = new FakeDownstream();
    const owner = changeOwner(downstream, { applies: true });
    const credit = issueCredit(downstream, { compensate: true });
    const { agent, model } = scriptedAgent(creditAndOwnerSteps('unreachable'), [credit, owner]);
    const runtime = runtimes.open(store, [agent]);
    const run = await startAndDrive(runtime, 'Credit acct_7 and give it to dana.');
    const [creditKey, ownerKey] = creditAndOwnerKeys(run);

    expect(run.status).toBe('failed');
    expect(run.error).toEqual({ code: 'RUN_CALL_UNKNOWN', message: reasonFor(ownerKey) });
    expect(run.statusReason).toBe(reasonFor(ownerKey));
    expect(model.received).toHaveLength(1);
    expect(await store.ledger.get(TENANT, ownerKey)).toMatchObject({ status: 'indeterminate' });
    expect(await store.ledger.get(TENANT, creditKey)).toMatchObject({ status: 'completed' });
    expect(await store.ledger.get(TENANT, `${creditKey}:compensation`)).toBeUndefined();
    expect(downstream.undone.size).toBe(0);
    expect(await runtime.recover()).toEqual([]);
    expect(owner.executions).toEqual([ownerKey]);
    expect(credit.executions).toEqual([creditKey]);
  });

  it('fails by default after asking a reconcile hook that cannot tell, which is noted in the history', async () => {
    const downstream = new FakeDownstream();
    const cannotTell: ReconcileHook = () => ({ status: 'unknown', reason: 'the CRM audit log is down' });
    const owner = changeOwner(downstream, { applies: true, reconcile: cannotTell });
    const { agent, model } = scriptedAgent(ownerStep, [owner]);
    const run = await startAndDrive(runtimes.open(store, [agent]), 'Give acct_7 to dana.');
    const key = onlyKey(run);

    expect(run.status).toBe('failed');
    expect(run.error?.code).toBe('RUN_CALL_UNKNOWN');
    expect(run.statusReason).toContain(key);
    expect(model.received).toHaveLength(1);
    expect(summary(await store.ledger.history(TENANT, key))).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->indeterminate',
      'note:-:indeterminate->-',
    ]);
    expect(owner.executions).toEqual([key]);
  });

  it('resumes a paused run once the sweep finds the call settled by its late outcome', async () => {
    const downstream = new FakeDownstream();
    const release = deferred();
    const owner = changeOwner(downstream, { applies: true, release: release.promise });
    const { agent, model } = scriptedAgent(ownerStep, [owner], { onIndeterminate: 'pause' });
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Give acct_7 to dana.');
    const key = onlyKey(waiting);
    expect(waiting.status).toBe('awaiting_reconciliation');

    release.resolve();
    await runtime.ledger.drain(); // the abandoned attempt answers, and its outcome is recorded
    expect((await store.ledger.get(TENANT, key))?.status).toBe('completed');
    expect((await runtime.getRun(TENANT, waiting.runId)).status).toBe('awaiting_reconciliation');

    const recovered = await runtime.recover();

    expect(recovered.map((r) => r.end)).toEqual([{ kind: 'ended', status: 'completed' }]);
    expect(toolResultsIn(model.received[1]).map((h) => h.output)).toEqual([
      {
        type: 'json',
        value: { status: 'completed', result: { receipt: 'rcpt_1', ...OWNER }, note: NOTE.replayed },
      },
    ]);
    expect(summary(await store.ledger.history(TENANT, key))).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->indeterminate',
      'transition:outcome:indeterminate->completed',
    ]);
    expect(owner.executions).toEqual([key]);
    expect(downstream.effects()).toEqual({ [key]: 1 });
  });

  it('requeues a settled run even when more than a batch of older runs stay blocked', async () => {
    const { runtime, paused } = await pausedRuns(3);
    expect(paused.map((r) => r.status)).toEqual(Array(3).fill('awaiting_reconciliation'));
    const newest = paused[2] as RunRecord;
    // Settled where no runtime sees it (a library call in another process): only the sweep can notice.
    await settleUnseen(runtime, newest);
    const cursors = new Map();
    const sweep = () => sweepWaiting({ ledger: runtime.ledger, batch: 2, cursors });
    // Other tests of this file left runs waiting too: however many, the sweep pages through them all.
    const waiting = await store.runs.listWaiting('awaiting_reconciliation', 1_000);
    let sweeps = 0;
    while ((await runtime.getRun(TENANT, newest.runId)).status !== 'queued' && sweeps <= waiting.length) {
      await sweep();
      sweeps += 1;
    }

    expect((await runtime.getRun(TENANT, newest.runId)).status).toBe('queued');
    expect(sweeps).toBeLessThanOrEqual(Math.ceil(waiting.length / 2));
    for (const older of paused.slice(0, 2)) {
      expect((await runtime.getRun(TENANT, older.runId)).status).toBe('awaiting_reconciliation');
    }
  });

  it('sweeps a page of waiting runs in bulk: the page, its calls and its approvals in one read each', async () => {
    const { runtime, paused } = await pausedRuns(6);
    // Half of them settled by an operator where no runtime sees it: only the sweep can notice.
    for (const run of paused.filter((_, i) => i % 2 === 0)) {
      await settleUnseen(runtime, run);
    }
    const reads: string[] = [];
    const counted = <T extends object>(part: T, name: string): T =>
      new Proxy(part, {
        get: (target, property, receiver) => {
          const value: unknown = Reflect.get(target, property, receiver);
          if (typeof value !== 'function') return value;
          return (...args: unknown[]) => {
            reads.push(`${name}.${String(property)}`);
            return (value as (...a: unknown[]) => unknown).apply(target, args);
          };
        },
      });
    const watched = Object.assign(Object.create(store) as Store, {
      ledger: counted(store.ledger, 'ledger'),
      runs: counted(store.runs, 'runs'),
    });
    const ledger = Object.assign(Object.create(runtime.ledger) as typeof runtime.ledger, { store: watched });
    // Other tests of this file left runs waiting too: one page holds them all.
    const waiting = await store.runs.listWaiting('awaiting_reconciliation', 1_000);
    const requeued = await sweepWaiting({ ledger, batch: 1_000 });

    expect(requeued).toBeGreaterThanOrEqual(3);
    for (const [i, run] of paused.entries()) {
      expect((await runtime.getRun(TENANT, run.runId)).status).toBe(
        i % 2 === 0 ? 'queued' : 'awaiting_reconciliation',
      );
    }
    // However many runs wait: a page per status, one read of their calls, then one compare-and-set
    // requeue per run nothing holds.
    expect(waiting.length).toBeGreaterThanOrEqual(6);
    expect(reads.filter((r) => !r.endsWith('.requeue'))).toEqual([
      'runs.listWaiting',
      'ledger.getMany',
      'runs.listWaiting',
      'runs.approvalsOfRuns',
    ]);
    expect(reads.filter((r) => r.endsWith('.requeue'))).toHaveLength(requeued);
  });

  it('asks the reconcile hook again on the sweep, and resumes the run when it finds the effect', async () => {
    const downstream = new FakeDownstream();
    let visible = false;
    const lagging: ReconcileHook = (record) => {
      const found = downstream.find(record.idempotencyKey);
      return visible && found !== undefined
        ? { status: 'completed', value: found }
        : { status: 'unknown', reason: 'the CRM replica is behind' };
    };
    const owner = changeOwner(downstream, { applies: true, reconcile: lagging });
    const { agent, model } = scriptedAgent(ownerStep, [owner], { onIndeterminate: 'pause' });
    const runtime = runtimes.open(store, [agent], { reconcileEveryMs: 0 });
    const waiting = await startAndDrive(runtime, 'Give acct_7 to dana.');
    const key = onlyKey(waiting);
    expect(waiting.status).toBe('awaiting_reconciliation');
    expect(model.received).toHaveLength(1);

    visible = true;
    const recovered = await runtime.recover();

    expect(recovered.map((r) => r.end)).toEqual([{ kind: 'ended', status: 'completed' }]);
    expect(toolResultsIn(model.received[1]).map((h) => h.output)).toEqual([
      { type: 'json', value: { status: 'completed', result: { receipt: 'rcpt_1', ...OWNER } } },
    ]);
    expect(summary(await store.ledger.history(TENANT, key))).toEqual([
      'transition:reserve:-->started',
      'transition:outcome:started->indeterminate',
      'note:-:indeterminate->-',
      'transition:reconcile:indeterminate->completed',
    ]);
    expect(owner.executions).toEqual([key]);
  });
});
