import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { argsDigest } from '../../src/ledger/index.js';
import type { Store } from '../../src/store/index.js';
import { repeatDigestOf } from '../../src/tools/index.js';
import type { RunRecord } from '../../src/run-state/index.js';
import {
  OPERATOR,
  Runtimes,
  STORES,
  TENANT,
  callIdsOf,
  keyOf,
  newRunId,
  scriptedAgent,
  startAndDrive,
  toolResultsIn,
  type OpenedStore,
} from './fixtures.js';
import { CREDIT, FakeDownstream, ORDER, issueCredit, lookupOrder } from './tools.js';

/*
 * The fourth way a tool runs twice: the model makes the same call again. A new call whose tool and
 * identity (`repeatKey`, by default every argument) equal an earlier call of its run that took
 * effect or may have is a repeat: under `ask` (the default) it waits for an operator's approval,
 * under `refuse` the model hears the earlier outcome, under `allow` it runs. Each case counts the
 * downstream's effects and reads the approvals, the ledger and the run's events.
 */

/** A credit no other test of the file makes: the tenant-wide window sees every run of the tenant. */
const WINDOWED = { accountId: 'acct_windowed', amountCents: 2500 };

const creditTwice = (second = CREDIT) => [
  { toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] },
  { toolCalls: [{ toolName: 'issue_credit', input: second }] },
  { text: 'Done.' },
];

describe.each(STORES)('repeats on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  beforeAll(async () => {
    opened = await open('runs_repeats');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  async function repeatEvents(run: RunRecord) {
    return (await store.runs.events(TENANT, run.runId, 0, 1_000))
      .filter((e) => e.type === 'tool.repeat')
      .map((e) => e.data);
  }

  it('asks by default: the same credit again waits for an approval that names the first; approved, it goes out', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const { agent, model } = scriptedAgent(creditTwice(), [credit]);
    const runtime = runtimes.open(store, [agent]);

    const waiting = await startAndDrive(runtime, 'Credit acct_7 $25.');
    const [first, second] = callIdsOf(waiting).map((id) => keyOf(waiting, id));
    expect(waiting.status).toBe('awaiting_approval');
    expect(Object.values(downstream.effects())).toEqual([1]);
    expect(await store.ledger.get(TENANT, second!)).toBeUndefined();
    expect(await store.runs.approvalsOfRun(TENANT, waiting.runId)).toMatchObject([
      { idempotencyKey: second, repeatOf: first, status: 'pending', args: CREDIT },
    ]);
    expect(await repeatEvents(waiting)).toEqual([
      { key: second, toolName: 'issue_credit', repeatOf: first, decision: 'ask' },
    ]);

    await runtime.approve({ tenantId: TENANT, idempotencyKey: second!, actorId: OPERATOR });
    const done = await runtime.drive(TENANT, waiting.runId);
    expect(done.status).toBe('completed');
    expect(downstream.effects()).toEqual({ [first!]: 1, [second!]: 1 });
    expect(credit.executions).toEqual([first, second]);
    expect(toolResultsIn(model.received[2]).at(-1)?.output).toMatchObject({
      type: 'json',
      value: { status: 'completed' },
    });
    expect((await repeatEvents(done)).map((e) => (e as { decision: string }).decision)).toEqual([
      'ask',
      'approved',
    ]);
  });

  it('rejected, the repeat never goes out and the model hears the rejection as a repeat', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const { agent, model } = scriptedAgent(creditTwice(), [credit]);
    const runtime = runtimes.open(store, [agent]);

    const waiting = await startAndDrive(runtime, 'Credit acct_7 $25.');
    const [first, second] = callIdsOf(waiting).map((id) => keyOf(waiting, id));
    await runtime.reject({
      tenantId: TENANT,
      idempotencyKey: second!,
      actorId: OPERATOR,
      reason: 'already credited',
    });
    const done = await runtime.drive(TENANT, waiting.runId);
    expect(done.status).toBe('completed');
    expect(downstream.effects()).toEqual({ [first!]: 1 });
    expect(await store.ledger.get(TENANT, second!)).toBeUndefined();
    expect(toolResultsIn(model.received[2]).at(-1)?.output).toMatchObject({
      type: 'error-json',
      value: { status: 'rejected', reason: `already credited (asked for as a repeat of tool call ${first})` },
    });
  });

  it('refuse: nothing runs, and the model hears the earlier call, its result and its key', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const { agent, model } = scriptedAgent(creditTwice(), [credit], { onRepeat: 'refuse' });
    const runtime = runtimes.open(store, [agent]);

    const done = await startAndDrive(runtime, 'Credit acct_7 $25.');
    const [first, second] = callIdsOf(done).map((id) => keyOf(done, id));
    expect(done.status).toBe('completed');
    expect(downstream.effects()).toEqual({ [first!]: 1 });
    expect(await store.ledger.get(TENANT, second!)).toBeUndefined();
    expect(await store.runs.approvalsOfRun(TENANT, done.runId)).toEqual([]);
    expect(toolResultsIn(model.received[2]).at(-1)?.output).toMatchObject({
      type: 'error-json',
      value: {
        status: 'repeat_refused',
        earlier: {
          key: first,
          status: 'completed',
          result: { receipt: 'rcpt_1', ...CREDIT },
          result_reference: 'rcpt_1',
        },
      },
    });
    expect(await repeatEvents(done)).toEqual([
      { key: second, toolName: 'issue_credit', repeatOf: first, decision: 'refuse' },
    ]);
  });

  it('allow: the same credit goes out twice, as before', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { onRepeat: 'allow' });
    const { agent } = scriptedAgent(creditTwice(), [credit]);
    const runtime = runtimes.open(store, [agent]);

    const done = await startAndDrive(runtime, 'Credit acct_7 $25.');
    expect(done.status).toBe('completed');
    expect(Object.values(downstream.effects())).toEqual([1, 1]);
    expect(await repeatEvents(done)).toEqual([]);
  });

  it.each([
    ['a reworded memo', { memo: true }, { ...CREDIT, memo: 'as promised' }, { ...CREDIT, memo: 'goodwill' }],
    [
      'another amount',
      { repeatKey: (a: Record<string, unknown>) => a.accountId },
      CREDIT,
      { ...CREDIT, amountCents: 2600 },
    ],
  ] as const)('catches %s with a repeatKey that ignores it', async (_what, options, one, two) => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, {
      ...options,
      repeatKey: 'repeatKey' in options ? options.repeatKey : (a) => [a.accountId, a.amountCents],
    });
    const { agent } = scriptedAgent(
      [
        { toolCalls: [{ toolName: 'issue_credit', input: one }] },
        { toolCalls: [{ toolName: 'issue_credit', input: two }] },
        { text: 'Done.' },
      ],
      [credit],
    );
    const runtime = runtimes.open(store, [agent]);
    const waiting = await startAndDrive(runtime, 'Credit acct_7.');
    const [first, second] = callIdsOf(waiting).map((id) => keyOf(waiting, id));
    expect(waiting.status).toBe('awaiting_approval');
    expect(downstream.effects()).toEqual({ [first!]: 1 });
    expect(await store.runs.approvalsOfRun(TENANT, waiting.runId)).toMatchObject([
      { idempotencyKey: second, repeatOf: first, args: two },
    ]);
  });

  it('without a repeatKey, another amount is another effect: it runs', async () => {
    const downstream = new FakeDownstream();
    const { agent } = scriptedAgent(creditTwice({ ...CREDIT, amountCents: 2600 }), [issueCredit(downstream)]);
    const done = await startAndDrive(runtimes.open(store, [agent]), 'Credit acct_7.');
    expect(done.status).toBe('completed');
    expect(Object.values(downstream.effects())).toEqual([1, 1]);
  });

  it('a call that did not take effect (refused before sending) is not a repeat: the next one runs', async () => {
    const downstream = new FakeDownstream();
    const notAttempted = issueCredit(downstream, { notAttempted: 'token expired' });
    const { agent } = scriptedAgent(creditTwice(), [notAttempted]);
    const done = await startAndDrive(runtimes.open(store, [agent]), 'Credit acct_7.');
    const [first, second] = callIdsOf(done).map((id) => keyOf(done, id));
    expect(done.status).toBe('completed');
    expect((await store.ledger.get(TENANT, first!))?.status).toBe('failed');
    expect((await store.ledger.get(TENANT, second!))?.status).toBe('failed');
    // Both ran (each refused before sending): the second was not held as a repeat of the first.
    expect(notAttempted.executions).toEqual([first, second]);
    expect(await store.runs.approvalsOfRun(TENANT, done.runId)).toEqual([]);
    expect(downstream.effects()).toEqual({});
  });

  it('a read is never a repeat', async () => {
    const lookup = lookupOrder();
    const { agent } = scriptedAgent(
      [
        { toolCalls: [{ toolName: 'lookup_order', input: ORDER }] },
        { toolCalls: [{ toolName: 'lookup_order', input: ORDER }] },
        { text: 'Delivered.' },
      ],
      [lookup],
    );
    const done = await startAndDrive(runtimes.open(store, [agent]), 'Where is ord_1?');
    expect(done.status).toBe('completed');
    expect(lookup.executions).toHaveLength(2);
  });

  it('two identical calls in one response: the first goes out, the second is asked about', async () => {
    const downstream = new FakeDownstream();
    const { agent } = scriptedAgent(
      [
        {
          toolCalls: [
            { toolName: 'issue_credit', input: CREDIT },
            { toolName: 'issue_credit', input: CREDIT },
          ],
        },
        { text: 'Done.' },
      ],
      [issueCredit(downstream)],
    );
    const waiting = await startAndDrive(runtimes.open(store, [agent]), 'Credit acct_7 $25.');
    const [first, second] = callIdsOf(waiting).map((id) => keyOf(waiting, id));
    expect(waiting.status).toBe('awaiting_approval');
    expect(downstream.effects()).toEqual({ [first!]: 1 });
    expect(await store.runs.approvalsOfRun(TENANT, waiting.runId)).toMatchObject([
      { idempotencyKey: second, repeatOf: first },
    ]);
    expect((await repeatEvents(waiting)).map((e) => (e as { decision: string }).decision)).toEqual([
      'wait',
      'ask',
    ]);
  });

  it('a repeat across two turns of a conversation is caught', async () => {
    const downstream = new FakeDownstream();
    const { agent } = scriptedAgent(
      [
        { toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] },
        { text: 'Credited.' },
        { toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] },
        { text: 'Done.' },
      ],
      [issueCredit(downstream)],
    );
    const runtime = runtimes.open(store, [agent]);
    const answered = await startAndDrive(runtime, 'Credit acct_7 $25.');
    expect(answered.status).toBe('completed');
    await runtime.send({
      tenantId: TENANT,
      runId: answered.runId,
      content: 'It did not arrive, just try again.',
      clientMessageId: 'm-2',
    });
    const waiting = await runtime.drive(TENANT, answered.runId);
    const [first, second] = callIdsOf(waiting).map((id) => keyOf(waiting, id));
    expect(waiting.status).toBe('awaiting_approval');
    expect(downstream.effects()).toEqual({ [first!]: 1 });
    expect(await store.runs.approvalsOfRun(TENANT, waiting.runId)).toMatchObject([
      { idempotencyKey: second, repeatOf: first },
    ]);
  });

  it.each([
    ['failed', 'it runs', 'completed'],
    ['completed', 'it is asked about', 'awaiting_approval'],
  ] as const)(
    'in a tenant window, a repeat of another run’s unknown credit waits for it; settled %s, %s',
    async (settled, _then, ends) => {
      const account = { ...WINDOWED, accountId: `${WINDOWED.accountId}_${settled}` };
      const downstream = new FakeDownstream();
      const credit = issueCredit(downstream, { repeatWindowMs: 86_400_000 });
      const { agent } = scriptedAgent(
        [{ toolCalls: [{ toolName: 'issue_credit', input: account }] }, { text: 'Done.' }],
        [credit],
      );
      const runtime = runtimes.open(store, [agent]);
      // Another run's credit, left unknown (its process died after reserving it).
      const other = newRunId('other');
      const [reserved] = await store.ledger.reserve(
        [
          {
            tenantId: TENANT,
            idempotencyKey: `${other}:call_1`,
            runId: other,
            toolCallId: 'call_1',
            toolName: 'issue_credit',
            effect: 'external',
            args: account,
            argsDigest: argsDigest(account),
            compensationOf: null,
            attemptTimeoutMs: 1,
            repeatDigest: repeatDigestOf(credit.tool, account, argsDigest(account)),
          },
        ],
        { kind: 'runtime', id: 'dead-worker' },
      );
      expect(reserved?.kind).toBe('reserved');

      const waiting = await startAndDrive(runtime, 'Credit acct_7 $25.');
      const [id] = callIdsOf(waiting);
      expect(waiting.status).toBe('awaiting_reconciliation');
      expect(waiting.statusReason).toContain(`repeats ${other}:call_1`);
      expect(waiting.checkpoint.pending?.calls[0]?.waitsFor).toBe(`${other}:call_1`);
      expect(credit.executions).toEqual([]);

      await runtime.resolve({
        tenantId: TENANT,
        idempotencyKey: `${other}:call_1`,
        status: settled,
        reason: 'checked the books',
        actorId: OPERATOR,
      });
      await runtime.sweep();
      const done = await runtime.drive(TENANT, waiting.runId);
      expect(done.status).toBe(ends);
      if (settled === 'failed') {
        expect(credit.executions).toEqual([keyOf(waiting, id!)]);
      } else {
        expect(credit.executions).toEqual([]);
        expect(await store.runs.approvalsOfRun(TENANT, waiting.runId)).toMatchObject([
          { idempotencyKey: keyOf(waiting, id!), repeatOf: `${other}:call_1` },
        ]);
      }
    },
  );
});
