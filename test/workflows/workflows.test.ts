import type { LanguageModelV3Prompt } from '@ai-sdk/provider';
import { z } from 'zod';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { defineAgent, type Agent } from '../../src/agents/index.js';
import { scriptedModel, type ScriptStep } from '../../src/models/index.js';
import type { Runtime } from '../../src/runs/index.js';
import type { Store } from '../../src/store/index.js';
import { ToolNotAttemptedError } from '../../src/errors/index.js';
import { defineTool, external } from '../../src/tools/index.js';
import { startWorker, type Worker } from '../../src/worker/index.js';
import { defineWorkflow, WorkflowEngine, type WorkflowRunView } from '../../src/workflows/index.js';
import { codeOf, Runtimes, STORES, TENANT, newRunId, waitFor, type OpenedStore } from '../runs/fixtures.js';
import { FakeDownstream, issueCredit, lookupOrder } from '../runs/tools.js';

/*
 * Workflows of agent runs, on both stores, with a real worker loop advancing them: each node's run is
 * started once per attempt under its fixed run id, fan-out and fan-in, conditions, retry (refused at
 * load where an unknown call could not be settled; never past a call that took effect or may have: an
 * operator decides), pause for an operator, skip, cancel.
 */

const OPERATOR = 'ops-ana';

function lastUserText(prompt: LanguageModelV3Prompt): string {
  const user = prompt.filter((m) => m.role === 'user').at(-1);
  if (user === undefined) return '';
  return user.content.map((p) => (p.type === 'text' ? p.text : '')).join('');
}

/** An agent that answers `<name>: <its input>`, after one call of each of its tools at turn 0. */
function echoAgent(name: string, tools: Agent['tools'] = [], calls: ScriptStep['toolCalls'] = []): Agent {
  return defineAgent({
    name,
    instructions: `You are ${name}.`,
    model: scriptedModel((prompt, turn) =>
      turn === 0 && (calls?.length ?? 0) > 0
        ? { toolCalls: calls }
        : { text: `${name}: ${lastUserText(prompt)}` },
    ),
    tools,
  });
}

async function until(
  engine: WorkflowEngine,
  id: string,
  done: (w: WorkflowRunView) => boolean,
): Promise<WorkflowRunView> {
  let seen: WorkflowRunView | undefined;
  await waitFor(async () => {
    seen = await engine.get(TENANT, id);
    return done(seen);
  }, 15_000);
  return seen as WorkflowRunView;
}

describe.each(STORES)('workflows on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();
  const workers: Worker[] = [];

  beforeAll(async () => {
    opened = await open('workflows');
    store = opened.store;
  });
  afterEach(async () => {
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await runtimes.closeAll();
  });
  afterAll(() => opened.cleanup());

  function engineWith(
    agents: Agent[],
    workflows: Parameters<typeof defineWorkflow>[0][],
  ): {
    runtime: Runtime;
    engine: WorkflowEngine;
  } {
    const runtime = runtimes.open(store, agents);
    const engine = new WorkflowEngine(runtime, workflows.map(defineWorkflow));
    workers.push(startWorker(runtime, { workflows: engine, pollMs: 20, concurrency: 8 }));
    return { runtime, engine };
  }

  it('runs four nodes with a fan-out and a fan-in: each node run started once, under its fixed id, one effect per key', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { reconcile: true });
    const suffix = newRunId('a');
    const agents = [
      echoAgent(`triage_${suffix}`),
      echoAgent(
        `refund_${suffix}`,
        [credit.tool],
        [{ toolName: 'issue_credit', input: { accountId: 'acct_7', amountCents: 2500 } }],
      ),
      echoAgent(`notify_${suffix}`),
      echoAgent(`summary_${suffix}`),
    ];
    const { engine } = engineWith(agents, [
      {
        name: 'refund-review',
        input: z.object({ order: z.string() }),
        nodes: {
          triage: {
            agent: agents[0]!.name,
            input: ({ input }) => `order ${(input as { order: string }).order}`,
          },
          refund: {
            agent: agents[1]!.name,
            needs: ['triage'],
            input: ({ nodes }) => (nodes.triage as { text: string }).text,
          },
          notify: { agent: agents[2]!.name, needs: ['triage'], input: () => 'tell the customer' },
          summary: {
            agent: agents[3]!.name,
            needs: ['refund', 'notify'],
            input: ({ nodes }) =>
              `${(nodes.refund as { text: string }).text} / ${(nodes.notify as { text: string }).text}`,
          },
        },
        result: ({ nodes }) => (nodes.summary as { text: string }).text,
      },
    ]);
    const id = newRunId('wf');
    const started = await engine.start({
      tenantId: TENANT,
      workflow: 'refund-review',
      input: { order: 'ord_1' },
      workflowRunId: id,
    });
    expect(started.created).toBe(true);
    const done = await until(engine, id, (w) => w.status === 'completed');
    expect(done.result).toBe(
      `summary_${suffix}: refund_${suffix}: triage_${suffix}: order ord_1 / notify_${suffix}: tell the customer`,
    );
    expect(done.nodes.map((n) => [n.name, n.state, n.attempts.map((a) => a.runId)])).toEqual([
      ['triage', 'completed', [`${id}.triage.1`]],
      ['refund', 'completed', [`${id}.refund.1`]],
      ['notify', 'completed', [`${id}.notify.1`]],
      ['summary', 'completed', [`${id}.summary.1`]],
    ]);
    const events = await engine.events(TENANT, id);
    const startedNodes = events.filter((e) => e.kind === 'node.started').map((e) => e.node);
    expect(startedNodes.sort()).toEqual(['notify', 'refund', 'summary', 'triage']);
    // The summary started only after both of its needs ended.
    const at = (kind: string, node: string): number =>
      events.findIndex((e) => e.kind === kind && e.node === node);
    expect(at('node.started', 'summary')).toBeGreaterThan(at('node.ended', 'refund'));
    expect(at('node.started', 'summary')).toBeGreaterThan(at('node.ended', 'notify'));
    expect(events.at(-1)).toMatchObject({ kind: 'workflow.status', detail: { status: 'completed' } });
    expect(Object.values(downstream.effects())).toEqual([1]);
    expect(Object.keys(downstream.effects())[0]).toMatch(new RegExp(`^${id}\\.refund\\.1:`));

    // Starting it again is the same workflow run; another input under its id is refused.
    const again = await engine.start({
      tenantId: TENANT,
      workflow: 'refund-review',
      input: { order: 'ord_1' },
      workflowRunId: id,
    });
    expect(again.created).toBe(false);
    expect(
      await codeOf(() =>
        engine.start({
          tenantId: TENANT,
          workflow: 'refund-review',
          input: { order: 'ord_2' },
          workflowRunId: id,
        }),
      ),
    ).toBe('WORKFLOW_CONFLICT');
    expect(
      await codeOf(() => engine.start({ tenantId: TENANT, workflow: 'refund-review', input: { order: 7 } })),
    ).toBe('WORKFLOW_INPUT_INVALID');
    expect(await codeOf(() => engine.start({ tenantId: TENANT, workflow: 'nope', input: {} }))).toBe(
      'WORKFLOW_NOT_FOUND',
    );
  });

  it('skips a node whose condition is false, and the nodes that need it', async () => {
    const suffix = newRunId('c');
    const agents = [
      echoAgent(`check_${suffix}`),
      echoAgent(`pay_${suffix}`),
      echoAgent(`after_${suffix}`),
      echoAgent(`log_${suffix}`),
    ];
    const { engine } = engineWith(agents, [
      {
        name: 'conditional',
        nodes: {
          check: { agent: agents[0]!.name },
          pay: {
            agent: agents[1]!.name,
            needs: ['check'],
            when: ({ nodes }) => (nodes.check as { text: string }).text.includes('approve'),
          },
          after: { agent: agents[2]!.name, needs: ['pay'] },
          log: { agent: agents[3]!.name, needs: ['check'] },
        },
      },
    ]);
    const id = newRunId('wf');
    await engine.start({ tenantId: TENANT, workflow: 'conditional', input: 'deny it', workflowRunId: id });
    const done = await until(engine, id, (w) => w.status === 'completed');
    expect(done.nodes.map((n) => [n.name, n.state])).toEqual([
      ['check', 'completed'],
      ['pay', 'skipped'],
      ['log', 'completed'],
      ['after', 'skipped'],
    ]);
    expect(await store.runs.get(TENANT, `${id}.pay.1`)).toBeUndefined();
    expect(done.result).toEqual({
      check: { text: `check_${suffix}: deny it` },
      log: { text: `log_${suffix}: deny it` },
    });
  });

  it('refuses retry at load for a node whose agent can make an unguarded write, naming the workflow, the node and the tool', () => {
    const downstream = new FakeDownstream();
    const lookup = lookupOrder().tool;
    const unguarded = echoAgent(`payer_${newRunId('r')}`, [issueCredit(downstream).tool, lookup]);
    const guarded = echoAgent(`payer_${newRunId('g')}`, [
      issueCredit(downstream, { reconcile: true, name: 'issue_credit_hooked' }).tool,
      lookup,
    ]);
    const runtime = runtimes.open(store, [unguarded, guarded]);
    const workflow = (agent: string) =>
      defineWorkflow({ name: 'pay', nodes: { charge: { agent, recoveryPolicy: 'retry', maxAttempts: 2 } } });
    let thrown: unknown;
    try {
      new WorkflowEngine(runtime, [workflow(unguarded.name)]);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toMatchObject({ code: 'WORKFLOW_DEFINITION_INVALID' });
    const message = (thrown as Error).message;
    expect(message).toContain('workflow "pay"');
    expect(message).toContain('node "charge"');
    expect(message).toContain('"issue_credit" (external(), no reconcile hook)');
    expect(message).not.toContain('lookup_order');
    expect(() => new WorkflowEngine(runtime, [workflow(guarded.name)])).not.toThrow();
    expect(
      () => new WorkflowEngine(runtime, [defineWorkflow({ name: 'x', nodes: { a: { agent: 'ghost' } } })]),
    ).toThrow(/there is no agent "ghost"/);
  });

  it('retries a failed read-only node with a fresh run (new keys) after its backoff', async () => {
    const lookup = lookupOrder();
    let firstRuns = 0;
    const flaky = defineAgent({
      name: `fetch_${newRunId('f')}`,
      instructions: 'Fetch.',
      // Its first run keeps calling tools until max_steps ends it failed; the next answers.
      model: scriptedModel((_prompt, turn) => {
        if (turn === 0) firstRuns += 1;
        return firstRuns === 1
          ? { toolCalls: [{ toolName: 'lookup_order', input: { orderId: `ord_${turn}` } }] }
          : { text: 'fetched' };
      }),
      tools: [lookup.tool],
      maxSteps: 1,
    });
    const { engine } = engineWith(
      [flaky],
      [
        {
          name: 'fetch',
          nodes: { fetch: { agent: flaky.name, recoveryPolicy: 'retry', maxAttempts: 3, backoffMs: 200 } },
        },
      ],
    );
    const id = newRunId('wf');
    await engine.start({ tenantId: TENANT, workflow: 'fetch', input: 'go', workflowRunId: id });
    const done = await until(engine, id, (w) => w.status === 'completed');
    const [node] = done.nodes;
    expect(node?.attempts.map((a) => [a.runId, a.run?.status])).toEqual([
      [`${id}.fetch.1`, 'failed'],
      [`${id}.fetch.2`, 'completed'],
    ]);
    expect(lookup.executions.every((k) => k.startsWith(`${id}.fetch.1:`))).toBe(true);
    const events = await engine.events(TENANT, id);
    const ended = events.find((e) => e.kind === 'node.ended' && e.attempt === 1);
    const second = events.find((e) => e.kind === 'node.started' && e.attempt === 2);
    expect(Date.parse(second!.at) - Date.parse(ended!.at)).toBeGreaterThanOrEqual(190);
  });

  it('never retries past a credit that took effect: the node waits for an operator, who sees the call; a retry knowingly is told of it', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream, { reconcile: true });
    const prompts: string[] = [];
    const payer = defineAgent({
      name: `crediter_${newRunId('c')}`,
      instructions: 'Credit the order.',
      // A run credits, then keeps calling tools until max_steps fails it; a run told that the credit
      // stands answers without crediting.
      model: scriptedModel((prompt, turn) => {
        const text = lastUserText(prompt);
        if (turn === 0) prompts.push(text);
        return text.includes('They stand')
          ? { text: 'the credit already stands' }
          : { toolCalls: [{ toolName: 'issue_credit', input: { accountId: 'acct_9', amountCents: 2500 } }] };
      }),
      tools: [credit.tool],
      maxSteps: 1,
    });
    const { engine } = engineWith(
      [payer],
      [
        {
          name: 'payout',
          nodes: { pay: { agent: payer.name, recoveryPolicy: 'retry', maxAttempts: 3, backoffMs: 0 } },
        },
      ],
    );
    const id = newRunId('wf');
    await engine.start({ tenantId: TENANT, workflow: 'payout', input: 'credit acct_9', workflowRunId: id });
    const waiting = await until(engine, id, (w) => w.status === 'awaiting_operator');
    const [credited] = await store.ledger.list(TENANT, { runId: `${id}.pay.1`, limit: 5 });
    expect(credited?.status).toBe('completed');
    expect(waiting.nodes[0]).toMatchObject({
      state: 'failed',
      standingCalls: [
        { idempotencyKey: credited!.idempotencyKey, toolName: 'issue_credit', status: 'completed' },
      ],
    });
    expect(waiting.statusReason).toContain(`issue_credit ${credited!.idempotencyKey}: completed`);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await store.runs.get(TENANT, `${id}.pay.2`)).toBeUndefined(); // no retry by itself
    expect(Object.values(downstream.effects())).toEqual([1]);

    await engine.decide(TENANT, id, {
      node: 'pay',
      action: 'retry',
      reason: 'checked the books: the credit stands, the summary is still owed',
      actorId: OPERATOR,
    });
    const done = await until(engine, id, (w) => w.status === 'completed');
    expect(done.nodes[0]?.attempts.map((a) => a.run?.status)).toEqual(['failed', 'completed']);
    expect(prompts[1]).toContain('credit acct_9');
    expect(prompts[1]).toContain(`issue_credit ${credited!.idempotencyKey}: completed`);
    const allowed = (await engine.events(TENANT, id)).find((e) => e.kind === 'node.retry_allowed');
    expect(allowed).toMatchObject({
      attempt: 2,
      detail: { by: OPERATOR, runId: `${id}.pay.1`, standingCalls: [{ toolName: 'issue_credit' }] },
    });
    expect(Object.values(downstream.effects())).toEqual([1]); // one credit in the books
  });

  it("stops for an operator while the failed run's call is unknown, and still after an operator settles it completed; skip goes on", async () => {
    let executions = 0;
    const hanging = defineTool({
      name: 'send_payout',
      description: 'Send a payout',
      input: z.object({ amountCents: z.number() }),
      effect: external(),
      timeoutMs: 100,
      // Its hook cannot tell: the first call stays unknown until an operator settles it.
      reconcile: () => ({ status: 'unknown', reason: 'the payout service does not say' }),
      execute: async (_args, ctx) => {
        executions += 1;
        if (executions === 1) await new Promise((resolve) => setTimeout(resolve, 5_000).unref());
        return { payout: ctx.idempotencyKey };
      },
    });
    const payer = defineAgent({
      name: `payer_${newRunId('u')}`,
      instructions: 'Pay.',
      model: scriptedModel((_p, turn) =>
        turn === 0
          ? { toolCalls: [{ toolName: 'send_payout', input: { amountCents: 100 } }] }
          : { text: 'paid' },
      ),
      tools: [hanging],
      toolPolicy: { onIndeterminate: 'fail' },
    });
    const after = echoAgent(`after_${newRunId('a')}`);
    const { runtime, engine } = engineWith(
      [payer, after],
      [
        {
          name: 'payout',
          nodes: {
            pay: { agent: payer.name, recoveryPolicy: 'retry', maxAttempts: 2, backoffMs: 0 },
            after: { agent: after.name, needs: ['pay'] },
          },
        },
      ],
    );
    const id = newRunId('wf');
    await engine.start({ tenantId: TENANT, workflow: 'payout', input: 'go', workflowRunId: id });
    const blocked = await until(engine, id, (w) => w.status === 'awaiting_operator');
    const [unknown] = await store.ledger.list(TENANT, { runId: `${id}.pay.1`, limit: 5 });
    expect(unknown?.status).toBe('indeterminate');
    expect(blocked.nodes[0]?.standingCalls.map((c) => [c.idempotencyKey, c.status])).toEqual([
      [unknown!.idempotencyKey, 'indeterminate'],
    ]);
    expect(blocked.nodes[0]?.reason).toContain('unknown (indeterminate)');

    // The payout took effect, says the operator: the node still waits, no fresh run pays again.
    await runtime.resolve({
      tenantId: TENANT,
      idempotencyKey: unknown!.idempotencyKey,
      status: 'completed',
      resultReference: 'po_77',
      reason: 'the payout service shows po_77',
      actorId: OPERATOR,
    });
    const settled = await until(engine, id, (w) => w.nodes[0]?.standingCalls[0]?.status === 'completed');
    expect(settled.status).toBe('awaiting_operator');
    expect(settled.nodes[0]?.standingCalls[0]?.resultReference).toBe('po_77');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await store.runs.get(TENANT, `${id}.pay.2`)).toBeUndefined();
    expect(executions).toBe(1);

    await engine.decide(TENANT, id, {
      node: 'pay',
      action: 'skip',
      reason: 'paid as po_77',
      actorId: OPERATOR,
    });
    const done = await until(engine, id, (w) => w.status === 'completed');
    expect(done.nodes.map((n) => [n.name, n.state])).toEqual([
      ['pay', 'skipped'],
      ['after', 'skipped'],
    ]);
    expect(await store.runs.get(TENANT, `${id}.pay.2`)).toBeUndefined();
    expect(executions).toBe(1);
  });

  it('retries by itself when every write of the failed run is known not to have taken effect', async () => {
    let runsStarted = 0;
    let executions = 0;
    const refusing = defineTool({
      name: 'send_payout',
      description: 'Send a payout',
      input: z.object({ amountCents: z.number() }),
      effect: external(),
      reconcile: () => ({ status: 'unknown' }),
      execute: () => {
        executions += 1;
        throw new ToolNotAttemptedError('the payout token expired');
      },
    });
    const payer = defineAgent({
      name: `payer_${newRunId('n')}`,
      instructions: 'Pay.',
      // Its first run's payout is refused before it is sent, then max_steps fails the run; the next
      // run answers.
      model: scriptedModel((_p, turn) => {
        if (turn === 0) runsStarted += 1;
        return runsStarted === 1
          ? { toolCalls: [{ toolName: 'send_payout', input: { amountCents: 100 } }] }
          : { text: 'nothing to pay' };
      }),
      tools: [refusing],
      maxSteps: 1,
    });
    const { engine } = engineWith(
      [payer],
      [
        {
          name: 'payout',
          nodes: { pay: { agent: payer.name, recoveryPolicy: 'retry', maxAttempts: 2, backoffMs: 0 } },
        },
      ],
    );
    const id = newRunId('wf');
    await engine.start({ tenantId: TENANT, workflow: 'payout', input: 'go', workflowRunId: id });
    const done = await until(engine, id, (w) => w.status !== 'running');
    expect(done.status).toBe('completed');
    const first = await store.ledger.list(TENANT, { runId: `${id}.pay.1`, limit: 5 });
    expect(first.map((r) => r.status)).toEqual(['failed']);
    expect(done.nodes[0]?.attempts.map((a) => a.run?.status)).toEqual(['failed', 'completed']);
    expect(done.nodes[0]?.standingCalls).toEqual([]);
    expect(executions).toBe(1);
  });

  it('pauses on a failed node with recovery_policy pause, and an operator retries it', async () => {
    let runs = 0;
    const agent = defineAgent({
      name: `pausing_${newRunId('p')}`,
      instructions: 'Work.',
      model: scriptedModel((_p, turn) => {
        if (turn === 0) runs += 1;
        return runs === 1
          ? { toolCalls: [{ toolName: 'lookup_order', input: { orderId: `o${turn}` } }] }
          : { text: 'done' };
      }),
      tools: [lookupOrder().tool],
      maxSteps: 1,
    });
    const { engine } = engineWith(
      [agent],
      [{ name: 'paused', nodes: { work: { agent: agent.name, recoveryPolicy: 'pause' } } }],
    );
    const id = newRunId('wf');
    await engine.start({ tenantId: TENANT, workflow: 'paused', input: 'go', workflowRunId: id });
    const waiting = await until(engine, id, (w) => w.status === 'awaiting_operator');
    expect(waiting.statusReason).toMatch(/waiting for an operator/);
    expect(
      await codeOf(() =>
        engine.decide(TENANT, id, { node: 'other', action: 'retry', reason: 'x', actorId: OPERATOR }),
      ),
    ).toBe('WORKFLOW_NOT_PAUSED');
    await engine.decide(TENANT, id, {
      node: 'work',
      action: 'retry',
      reason: 'checked: the lookup is safe',
      actorId: OPERATOR,
    });
    const done = await until(engine, id, (w) => w.status === 'completed');
    expect(done.nodes[0]?.attempts.map((a) => a.runId)).toEqual([`${id}.work.1`, `${id}.work.2`]);
    const events = await engine.events(TENANT, id);
    expect(events.find((e) => e.kind === 'node.retry_allowed')).toMatchObject({
      node: 'work',
      attempt: 2,
      detail: { by: OPERATOR },
    });
  });

  it('cancels: its node run waiting for an approval is cancelled, no later node starts, nothing is compensated', async () => {
    const downstream = new FakeDownstream();
    const approved = issueCredit(downstream, { approval: true, compensate: true });
    const suffix = newRunId('x');
    const agents = [
      echoAgent(
        `ask_${suffix}`,
        [approved.tool],
        [{ toolName: 'issue_credit', input: { accountId: 'acct_1', amountCents: 100 } }],
      ),
      echoAgent(`next_${suffix}`),
    ];
    const { engine } = engineWith(agents, [
      {
        name: 'approval',
        nodes: { ask: { agent: agents[0]!.name }, next: { agent: agents[1]!.name, needs: ['ask'] } },
      },
    ]);
    const id = newRunId('wf');
    await engine.start({ tenantId: TENANT, workflow: 'approval', input: 'go', workflowRunId: id });
    await until(engine, id, (w) => w.nodes[0]?.attempts[0]?.run?.status === 'awaiting_approval');
    const cancelled = await engine.cancel(TENANT, id, { reason: 'the customer withdrew', actorId: OPERATOR });
    expect(cancelled.status).toBe('cancelled');
    expect((await store.runs.get(TENANT, `${id}.ask.1`))?.status).toBe('cancelled');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await store.runs.get(TENANT, `${id}.next.1`)).toBeUndefined();
    expect(downstream.effects()).toEqual({});
    expect(downstream.undone.size).toBe(0);
    expect(await codeOf(() => engine.cancel(TENANT, id, { reason: 'again', actorId: OPERATOR }))).toBe(
      'WORKFLOW_ALREADY_FINAL',
    );

    // A cancel whose process died after its first write: the next cancel finishes it.
    const half = newRunId('wf');
    await engine.start({ tenantId: TENANT, workflow: 'approval', input: 'go', workflowRunId: half });
    await until(engine, half, (w) => w.nodes[0]?.attempts[0]?.run?.status === 'awaiting_approval');
    await store.workflows.move({
      tenantId: TENANT,
      workflowRunId: half,
      from: ['running'],
      to: 'cancelled',
      statusReason: 'withdrawn',
      events: [],
    });
    expect((await store.runs.get(TENANT, `${half}.ask.1`))?.status).toBe('awaiting_approval');
    expect(await codeOf(() => engine.cancel(TENANT, half, { reason: 'withdrawn', actorId: OPERATOR }))).toBe(
      'WORKFLOW_ALREADY_FINAL',
    );
    expect((await store.runs.get(TENANT, `${half}.ask.1`))?.status).toBe('cancelled');
  });

  it('keeps a wake-up that came while the workflow run was claimed: its next look is at once, not after the recheck', async () => {
    const id = newRunId('wf');
    await store.workflows.create({
      tenantId: TENANT,
      workflowRunId: id,
      workflow: 'any',
      input: 'go',
      inputDigest: 'd',
    });
    const claimed = (await store.workflows.claimDue('first', 10_000, 100)).find(
      (w) => w.workflowRunId === id,
    );
    expect(claimed).toBeDefined();
    // A node run ends while the claim's holder plans from what it read before: it wakes the run.
    await store.workflows.wake(TENANT, id);
    const written = await store.workflows.advance({
      tenantId: TENANT,
      workflowRunId: id,
      epoch: claimed!.leaseEpoch,
      events: [],
      status: 'running',
      statusReason: 'waiting for a node',
      wakeInMs: 30_000,
    });
    expect(written).toBe(true);
    const again = await store.workflows.claimDue('second', 10_000, 100);
    expect(again.map((w) => w.workflowRunId)).toContain(id);

    // Without a wake-up, the advance's own time stands.
    const quiet = again.find((w) => w.workflowRunId === id)!;
    await store.workflows.advance({
      tenantId: TENANT,
      workflowRunId: id,
      epoch: quiet.leaseEpoch,
      events: [],
      status: 'running',
      statusReason: 'waiting for a node',
      wakeInMs: 30_000,
    });
    expect((await store.workflows.claimDue('third', 10_000, 100)).map((w) => w.workflowRunId)).not.toContain(
      id,
    );
  });

  it('refuses the bookkeeping of a stale claim: a node run is started once however many processes advance', async () => {
    const agent = echoAgent(`solo_${newRunId('s')}`);
    const runtime = runtimes.open(store, [agent]);
    const engine = new WorkflowEngine(runtime, [
      defineWorkflow({ name: 'solo', nodes: { only: { agent: agent.name } } }),
    ]);
    const id = newRunId('wf');
    await engine.start({ tenantId: TENANT, workflow: 'solo', input: 'go', workflowRunId: id });
    const claimed = await store.workflows.claimDue('first', 10_000, 100);
    const mine = claimed.find((w) => w.workflowRunId === id);
    expect(mine).toBeDefined();
    // Another process takes it over (its claim expired, say) and advances first.
    const taken = await store.workflows.move({
      tenantId: TENANT,
      workflowRunId: id,
      from: ['running'],
      to: 'running',
      statusReason: null,
      events: [],
    });
    expect(taken!.leaseEpoch).toBeGreaterThan(mine!.leaseEpoch);
    expect(await engine.advance(mine!)).toBe(false); // the stale claim writes nothing
    expect(await store.runs.get(TENANT, `${id}.only.1`)).toBeUndefined();
    const [fresh] = (await store.workflows.claimDue('second', 10_000, 100)).filter(
      (w) => w.workflowRunId === id,
    );
    expect(await engine.advance(fresh!)).toBe(true);
    expect(await engine.advance(fresh!)).toBe(false); // its lease was let go with the write
    const started = (await engine.events(TENANT, id)).filter((e) => e.kind === 'node.started');
    expect(started.map((e) => e.runId)).toEqual([`${id}.only.1`]);
    expect((await store.runs.get(TENANT, `${id}.only.1`))?.status).toBe('queued');
  });
});
