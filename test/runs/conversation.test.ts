import { validateUIMessages } from 'ai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent } from '../../src/agents/index.js';
import { scriptedModel, type ScriptStep } from '../../src/models/index.js';
import type { Store } from '../../src/store/index.js';
import {
  Runtimes,
  STORES,
  TENANT,
  callIdsOf,
  codeOf,
  newRunId,
  scriptedAgent,
  toolResultsIn,
  type OpenedStore,
} from './fixtures.js';
import { FakeDownstream, issueCredit, lookupOrder } from './tools.js';

/*
 * Conversations: a completed run takes the next user message and answers it with the same loop
 * (durable response before any reservation, one key per call, one effect per key); what each model
 * response cost is summed on the run and the tenant; a token budget ends a run before a model call
 * that would pass it; max_steps counts per turn.
 */

const credit = (accountId: string, amountCents: number) => ({
  toolName: 'issue_credit',
  input: { accountId, amountCents },
});

/** Three turns, each with a call: a lookup and a credit, a second credit, a third credit. */
const THREE_TURNS: ScriptStep[] = [
  {
    toolCalls: [{ toolName: 'lookup_order', input: { orderId: 'ord_1' } }, credit('acct_7', 2500)],
    usage: { inputTokens: 120, outputTokens: 30 },
  },
  { text: 'I credited $25 to acct_7.', usage: { inputTokens: 180, outputTokens: 12 } },
  {
    toolCalls: [credit('acct_7', 1000)],
    usage: { inputTokens: 220, outputTokens: 20, cachedInputTokens: 100 },
  },
  { text: 'And $10 more.', usage: { inputTokens: 260, outputTokens: 8 } },
  { toolCalls: [credit('acct_9', 500)], usage: { inputTokens: 300, outputTokens: 25, reasoningTokens: 10 } },
  { text: 'And $5 to acct_9.', usage: { inputTokens: 340, outputTokens: 9 } },
];

describe.each(STORES)('conversations on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();

  beforeAll(async () => {
    opened = await open('runs_conversation');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  it('answers three turns with calls in each: keys of one run, one effect per key, usage summed, turns listed', async () => {
    const downstream = new FakeDownstream();
    const { agent, model } = scriptedAgent(THREE_TURNS, [lookupOrder(), issueCredit(downstream)]);
    const runtime = runtimes.open(store, [agent]);
    const runId = newRunId('chat');
    const first = await runtime.run({
      tenantId: TENANT,
      agent: agent.name,
      input: 'Credit acct_7 $25',
      runId,
    });
    expect(first).toMatchObject({
      status: 'completed',
      turn: 1,
      result: { text: 'I credited $25 to acct_7.' },
    });

    const second = await runtime.send({
      tenantId: TENANT,
      runId,
      content: 'Please add $10 more.',
      clientMessageId: 'cm-2',
      actorId: 'customer-1',
    });
    expect(second).toMatchObject({
      sent: true,
      turn: { turn: 2, messageIndex: 4 },
      run: { status: 'queued' },
    });
    expect((await runtime.drive(TENANT, runId)).result).toEqual({ text: 'And $10 more.' });

    await runtime.send({
      tenantId: TENANT,
      runId,
      content: [
        { type: 'text', text: 'And $5 to this account:' },
        { type: 'json', value: { accountId: 'acct_9' } },
        {
          type: 'file',
          data: 'https://files.example/statement.pdf',
          mediaType: 'application/pdf',
          filename: 's.pdf',
        },
      ],
      clientMessageId: 'cm-3',
    });
    const done = await runtime.drive(TENANT, runId);
    expect(done.error).toBeNull();
    expect(done).toMatchObject({ status: 'completed', turn: 3, turnStep: 4, checkpoint: { step: 6 } });
    expect(done.result).toEqual({ text: 'And $5 to acct_9.' });

    // Every call of every turn has a key of this run; each took effect once.
    const ids = callIdsOf(done);
    expect(ids).toHaveLength(4);
    expect(new Set(ids).size).toBe(4);
    expect(Object.values(downstream.effects())).toEqual([1, 1, 1]);
    for (const id of ids) {
      expect((await store.ledger.get(TENANT, `${runId}:${id}`))?.status).toBe('completed');
    }
    // The third turn's model heard the whole conversation: the earlier turns' results, then the parts.
    const heard = model.received.at(-2)!;
    expect(toolResultsIn(heard)).toHaveLength(3);
    const lastUser = heard.filter((m) => m.role === 'user').at(-1);
    expect(lastUser?.content).toEqual([
      { type: 'text', text: 'And $5 to this account:' },
      { type: 'text', text: '{"accountId":"acct_9"}' },
      expect.objectContaining({ type: 'file', mediaType: 'application/pdf', filename: 's.pdf' }),
    ]);

    // Usage: every response once.
    expect(done.usage).toEqual({
      inputTokens: 1420,
      outputTokens: 104,
      reasoningTokens: 10,
      cachedInputTokens: 100,
      totalTokens: 1524,
    });
    const tenant = await runtime.usage(TENANT);
    expect(tenant.byAgent.find((a) => a.agent === agent.name)).toEqual({
      agent: agent.name,
      runs: 1,
      usage: done.usage,
    });
    expect((await runtime.turns(TENANT, runId)).map((t) => [t.turn, t.clientMessageId, t.actorId])).toEqual([
      [2, 'cm-2', 'customer-1'],
      [3, 'cm-3', null],
    ]);

    // Read back as UI messages: user, assistant (two steps), user, assistant, user, assistant.
    const ui = await runtime.uiMessages(TENANT, runId);
    expect(ui.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant', 'user', 'assistant']);
    expect(ui[1]!.parts.map((p) => p.type)).toEqual([
      'step-start',
      'tool-lookup_order',
      'tool-issue_credit',
      'step-start',
      'text',
    ]);
    expect(ui[1]!.parts[2]).toMatchObject({ state: 'output-available', input: { accountId: 'acct_7' } });
    expect(ui[4]!.parts.map((p) => p.type)).toEqual(['text', 'text', 'file']);
    await expect(validateUIMessages({ messages: ui })).resolves.toHaveLength(6);
  });

  it('takes a message sent twice once, refuses another under the same id, and a run that has not answered', async () => {
    const { agent } = scriptedAgent([{ text: 'hello' }, { text: 'second' }, { text: 'third' }], []);
    const runtime = runtimes.open(store, [agent]);
    const { run } = await runtime.startRun({
      tenantId: TENANT,
      agent: agent.name,
      input: 'hi',
      runId: newRunId(),
    });
    const send = (content: string, clientMessageId: string) =>
      runtime.send({ tenantId: TENANT, runId: run.runId, content, clientMessageId });
    // Queued, not answered yet.
    expect(await codeOf(() => send('are you there?', 'm-1'))).toBe('RUN_NOT_AWAITING_MESSAGE');
    await runtime.drive(TENANT, run.runId);
    expect((await send('again', 'm-2')).sent).toBe(true);
    const repeat = await send('again', 'm-2');
    expect(repeat).toMatchObject({ sent: false, turn: { turn: 2 } });
    expect(await codeOf(() => send('something else', 'm-2'))).toBe('RUN_MESSAGE_CONFLICT');
    expect(await codeOf(() => send('', 'm-4'))).toBe('RUN_INPUT_INVALID');
    expect(
      await codeOf(() =>
        runtime.send({
          tenantId: TENANT,
          runId: run.runId,
          content: [{ type: 'video' } as never],
          clientMessageId: 'm-5',
        }),
      ),
    ).toBe('RUN_INPUT_INVALID');
    expect(await codeOf(() => send('x', 'bad id!'))).toBe('RUN_INPUT_INVALID');
    expect(await codeOf(() => runtime.send({ tenantId: TENANT, runId: 'run_missing', content: 'x' }))).toBe(
      'RUN_NOT_FOUND',
    );
    const after = await runtime.drive(TENANT, run.runId);
    expect(after.result).toEqual({ text: 'second' });
    expect(after.checkpoint.messages.filter((m) => (m as { role: string }).role === 'user')).toHaveLength(2);
    // A cancelled run takes no more messages.
    expect((await send('third', 'm-6')).sent).toBe(true);
    await runtime.cancel(TENANT, run.runId, { reason: 'closed the chat', actorId: 'ops-ana' });
    expect(await codeOf(() => send('hello?', 'm-7'))).toBe('RUN_NOT_AWAITING_MESSAGE');
  });

  it('counts max_steps per turn', async () => {
    const lookups: ScriptStep = { toolCalls: [{ toolName: 'lookup_order', input: { orderId: 'ord_1' } }] };
    const { agent } = scriptedAgent(
      [lookups, { text: 'one' }, lookups, { text: 'two' }, lookups, lookups, lookups],
      [lookupOrder()],
      { maxSteps: 2 },
    );
    const runtime = runtimes.open(store, [agent]);
    const runId = newRunId();
    expect((await runtime.run({ tenantId: TENANT, agent: agent.name, input: 'a', runId })).status).toBe(
      'completed',
    );
    await runtime.send({ tenantId: TENANT, runId, content: 'b' });
    // Four model calls in all, two in this turn: within max_steps 2.
    expect((await runtime.drive(TENANT, runId)).status).toBe('completed');
    await runtime.send({ tenantId: TENANT, runId, content: 'c' });
    const failed = await runtime.drive(TENANT, runId);
    expect(failed).toMatchObject({ status: 'failed', error: { code: 'RUN_MAX_STEPS' } });
    expect(failed.error?.message).toContain('in turn 3');
  });

  it('ends a run before the model call that would pass its token budget', async () => {
    const model = scriptedModel([
      {
        toolCalls: [{ toolName: 'lookup_order', input: { orderId: 'ord_1' } }],
        usage: { inputTokens: 400, outputTokens: 50 },
      },
      { text: 'never asked' },
    ]);
    const lookup = lookupOrder();
    const agent = defineAgent({
      name: `budget_${newRunId()}`,
      instructions: 'x',
      model,
      tools: [lookup.tool],
      tokenBudget: 800,
    });
    const runtime = runtimes.open(store, [agent]);
    // 450 spent; the next prompt is at least 400: 850 would pass 800, so the call is not made.
    const run = await runtime.run({ tenantId: TENANT, agent: agent.name, input: 'x', runId: newRunId() });
    expect(run).toMatchObject({ status: 'failed', tokenBudget: 800, error: { code: 'RUN_BUDGET_EXCEEDED' } });
    expect(run.error?.message).toContain('spent 450 of its 800 tokens');
    expect(model.received).toHaveLength(1);
    // The lookup of the response it kept was made; its result is in the conversation.
    expect(lookup.executions).toHaveLength(1);
    expect(run.usage.totalTokens).toBe(450);

    // A run's own budget wins over the agent's; null means none.
    const model2 = scriptedModel([
      {
        toolCalls: [{ toolName: 'lookup_order', input: { orderId: 'ord_2' } }],
        usage: { inputTokens: 400, outputTokens: 50 },
      },
      { text: 'fine', usage: { inputTokens: 460, outputTokens: 5 } },
    ]);
    const agent2 = defineAgent({ ...agent, name: `budget2_${newRunId()}`, model: model2, tokenBudget: 800 });
    const runtime2 = runtimes.open(store, [agent2]);
    const unlimited = await runtime2.run({
      tenantId: TENANT,
      agent: agent2.name,
      input: 'x',
      runId: newRunId(),
      tokenBudget: null,
    });
    expect(unlimited).toMatchObject({ status: 'completed', tokenBudget: null, usage: { totalTokens: 915 } });
    expect(
      await codeOf(() =>
        runtime2.startRun({ tenantId: TENANT, agent: agent2.name, input: 'x', tokenBudget: 0 }),
      ),
    ).toBe('RUN_INPUT_INVALID');
  });
});
