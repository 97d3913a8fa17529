/* eslint-disable @typescript-eslint/no-unsafe-member-access -- HTTP answers are JSON of no static type, read by assertions */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readSse } from '../support/sse.js';
import { failRun } from './support/endpoints.js';
import { DIALECTS, TENANT, ApiHarness } from './support/harness.js';

/*
 * Workflow runs over HTTP: start (idempotent with a client id), read with each node, the events as
 * server-sent events to the end, cancel, and an operator's decision. The harness's workflow `review`
 * is node a (credit-agent, pause) then node b (approval-agent); the test advances it and drives its
 * node runs itself, as a worker would.
 */

describe.each(DIALECTS)('workflow runs over HTTP on %s', (dialect) => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  const start = (body: Record<string, unknown>) =>
    h.request('POST', '/v1/workflow-runs', { key: h.keys.operator, body });

  it('starts idempotently, shows each node and its runs, and streams its events until it ends', async () => {
    const id = `review-${dialect}-1`;
    const first = await start({ workflow: 'review', input: 'order ord_5', workflow_run_id: id });
    expect(first.status, first.text).toBe(201);
    expect(first.body).toMatchObject({ workflow_run_id: id, status: 'running', tenant_id: TENANT });
    expect((await start({ workflow: 'review', input: 'order ord_5', workflow_run_id: id })).status).toBe(200);
    const other = await start({ workflow: 'review', input: 'order ord_6', workflow_run_id: id });
    expect([other.status, other.body.error.code]).toEqual([409, 'WORKFLOW_CONFLICT']);
    const unknown = await start({ workflow: 'nope', input: 'x' });
    expect([unknown.status, unknown.body.error.code]).toEqual([404, 'WORKFLOW_NOT_FOUND']);
    const badId = await start({ workflow: 'review', input: 'x', workflow_run_id: 'has:colon' });
    expect(badId.status).toBe(400);

    // Node a: started by an advance, driven; node b waits for an approval, which we give.
    await h.workflows.advanceDue(100);
    await h.runtime.drive(TENANT, `${id}.a.1`);
    await h.workflows.runEnded(TENANT, `${id}.a.1`);
    await h.workflows.advanceDue(100);
    const mid = await h.request('GET', `/v1/workflow-runs/${id}`, { key: h.keys.viewer });
    expect(mid.body.nodes).toEqual([
      {
        name: 'a',
        agent: 'credit-agent',
        state: 'completed',
        reason: null,
        attempts: [{ attempt: 1, run_id: `${id}.a.1`, status: 'completed' }],
        standing_calls: [],
      },
      {
        name: 'b',
        agent: 'approval-agent',
        state: 'running',
        reason: null,
        attempts: [{ attempt: 1, run_id: `${id}.b.1`, status: 'queued' }],
        standing_calls: [],
      },
    ]);

    const stream = fetch(`${h.base}/v1/workflow-runs/${id}/events`, {
      headers: { authorization: `Bearer ${h.keys.viewer}` },
    });
    await h.runtime.drive(TENANT, `${id}.b.1`); // waits for its approval
    const [approval] = await h.store.runs.approvalsOfRun(TENANT, `${id}.b.1`);
    await h.runtime.approve({
      tenantId: TENANT,
      idempotencyKey: approval!.idempotencyKey,
      actorId: 'ops',
      reason: 'fine',
    });
    await h.runtime.drive(TENANT, `${id}.b.1`);
    await h.workflows.runEnded(TENANT, `${id}.b.1`);
    await h.workflows.advanceDue(100);
    const events = await readSse(await stream); // ends with the workflow run
    expect(
      events.map((e) => `${e.event}${typeof e.data.node === 'string' ? ` ${e.data.node}` : ''}`),
    ).toEqual([
      'workflow.started',
      'node.started a',
      'node.ended a',
      'node.started b',
      'node.ended b',
      'workflow.status',
    ]);
    expect(events.at(-1)?.data.detail).toEqual({ status: 'completed' });
    // From Last-Event-ID: only what came after.
    const resumed = await readSse(
      await fetch(`${h.base}/v1/workflow-runs/${id}/events`, {
        headers: { authorization: `Bearer ${h.keys.viewer}`, 'last-event-id': String(events[3]!.id) },
      }),
    );
    expect(resumed.map((e) => e.event)).toEqual(['node.ended', 'workflow.status']);
    const list = await h.request('GET', '/v1/workflow-runs?status=completed&workflow=review', {
      key: h.keys.viewer,
    });
    const items = list.body.items as { workflow_run_id: string }[];
    expect(items.map((w) => w.workflow_run_id)).toContain(id);
  });

  it('pauses on a failed node; an operator retries it; cancel cancels the node run and refuses twice', async () => {
    const id = `review-${dialect}-2`;
    expect((await start({ workflow: 'review', input: 'to fail', workflow_run_id: id })).status).toBe(201);
    await h.workflows.advanceDue(100);
    await failRun(h, `${id}.a.1`); // its model stayed down
    await h.workflows.runEnded(TENANT, `${id}.a.1`);
    await h.workflows.advanceDue(100);
    const paused = await h.request('GET', `/v1/workflow-runs/${id}`, { key: h.keys.viewer });
    expect(paused.body.status).toBe('awaiting_operator');
    expect(paused.body.status_reason).toContain('the provider stayed down');

    const wrong = await h.request('POST', `/v1/workflow-runs/${id}/decide`, {
      key: h.keys.operator,
      body: { node: 'b', action: 'retry', reason: 'b is not the one' },
    });
    expect([wrong.status, wrong.body.error.code]).toEqual([409, 'WORKFLOW_NOT_PAUSED']);
    const retried = await h.request('POST', `/v1/workflow-runs/${id}/decide`, {
      key: h.keys.operator,
      body: { node: 'a', action: 'retry', reason: 'the provider is back' },
    });
    expect(retried.body.status).toBe('running');
    await h.workflows.advanceDue(100);
    expect((await h.store.runs.get(TENANT, `${id}.a.2`))?.status).toBe('queued');

    const cancelled = await h.request('POST', `/v1/workflow-runs/${id}/cancel`, {
      key: h.keys.operator,
      body: { reason: 'the order was withdrawn' },
    });
    expect(cancelled.body.status).toBe('cancelled');
    expect((await h.store.runs.get(TENANT, `${id}.a.2`))?.status).toBe('cancelled');
    const again = await h.request('POST', `/v1/workflow-runs/${id}/cancel`, {
      key: h.keys.operator,
      body: { reason: 'again' },
    });
    expect([again.status, again.body.error.code]).toEqual([409, 'WORKFLOW_ALREADY_FINAL']);
  });

  it('skips a paused node: it and the nodes needing it are skipped, the workflow goes on; an unknown action is 400', async () => {
    const id = `review-${dialect}-3`;
    expect((await start({ workflow: 'review', input: 'to fail', workflow_run_id: id })).status).toBe(201);
    await h.workflows.advanceDue(100);
    await failRun(h, `${id}.a.1`);
    await h.workflows.runEnded(TENANT, `${id}.a.1`);
    await h.workflows.advanceDue(100);
    const bad = await h.request('POST', `/v1/workflow-runs/${id}/decide`, {
      key: h.keys.operator,
      body: { node: 'a', action: 'ignore', reason: 'x' },
    });
    expect(bad.status).toBe(400);
    const skipped = await h.request('POST', `/v1/workflow-runs/${id}/decide`, {
      key: h.keys.operator,
      body: { node: 'a', action: 'skip', reason: 'done by hand' },
    });
    expect(skipped.body.status).toBe('running');
    await h.workflows.advanceDue(100);
    const done = await h.request('GET', `/v1/workflow-runs/${id}`, { key: h.keys.viewer });
    expect(done.body.status).toBe('completed');
    expect((done.body.nodes as { name: string; state: string }[]).map((n) => [n.name, n.state])).toEqual([
      ['a', 'skipped'],
      ['b', 'skipped'],
    ]);
    expect(await h.store.runs.get(TENANT, `${id}.a.2`)).toBeUndefined();
  });
});
