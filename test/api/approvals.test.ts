/* eslint-disable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-argument -- HTTP answers are JSON of no static type, read by assertions */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { DIALECTS, TENANT, ApiHarness } from './support/harness.js';

describe.each(DIALECTS)('approvals over HTTP on %s', (dialect) => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  /** A run waiting for approval, and the key of its call. */
  async function waiting(tenantId = TENANT): Promise<{ runId: string; key: string }> {
    const runId = await h.drivenRun('approval-agent', tenantId);
    const [approval] = await h.store.runs.approvalsOfRun(tenantId, runId);
    expect(approval?.status).toBe('pending');
    return { runId, key: approval!.idempotencyKey };
  }

  it('lists pending approvals first, then the decided ones, page by page', async () => {
    const t = await h.newTenant();
    const a = await waiting(t.tenantId);
    await sleep(3);
    const b = await waiting(t.tenantId);
    await sleep(3);
    const c = await waiting(t.tenantId);
    const approved = await h.request('POST', `/v1/approvals/${a.key}/approve`, { key: t.operator, body: {} });
    expect(approved.status).toBe(200);

    const all = await h.request('GET', '/v1/approvals', { key: t.viewer });
    expect(all.body.items.map((x: { idempotency_key: string }) => x.idempotency_key)).toEqual([
      b.key,
      c.key,
      a.key,
    ]);
    const seen: string[] = [];
    let cursor: string | null = null;
    for (let i = 0; i < 5; i++) {
      const query: string = cursor === null ? '' : `&cursor=${cursor}`;
      const page = await h.request('GET', `/v1/approvals?limit=1${query}`, { key: t.viewer });
      seen.push(...page.body.items.map((x: { idempotency_key: string }) => x.idempotency_key));
      cursor = page.body.next_cursor as string | null;
      if (cursor === null) break;
    }
    expect(seen).toEqual([b.key, c.key, a.key]);
    const onlyApproved = await h.request('GET', '/v1/approvals?status=approved', { key: t.viewer });
    expect(onlyApproved.body.items.map((x: { idempotency_key: string }) => x.idempotency_key)).toEqual([
      a.key,
    ]);
  });

  it('approve: the run resumes and the call runs once, with the approver recorded', async () => {
    const { runId, key } = await waiting();
    const answer = await h.request('POST', `/v1/approvals/${key}/approve`, {
      key: h.keys.operator,
      body: { reason: 'amount checked' },
    });
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({
      idempotency_key: key,
      status: 'approved',
      decided_by: 'ops-ana',
      reason: 'amount checked',
    });
    expect((await h.store.runs.get(TENANT, runId))?.status).toBe('queued');
    await h.runtime.drive(TENANT, runId);
    expect((await h.store.runs.get(TENANT, runId))?.status).toBe('completed');
    expect(h.fixtures.downstream.credits.filter((k) => k === key)).toHaveLength(1);
    expect((await h.store.runs.getApproval(TENANT, key))?.status).toBe('consumed');
  });

  it('reject needs a reason (400, nothing changes); with one, the run resumes and the call never runs', async () => {
    const { runId, key } = await waiting();
    const before = await h.snapshot();
    for (const body of [{}, { reason: '   ' }]) {
      const refused = await h.request('POST', `/v1/approvals/${key}/reject`, { key: h.keys.operator, body });
      expect(refused.status).toBe(400);
      expect(refused.body.error.code).toBe('API_REQUEST_INVALID');
    }
    expect(await h.snapshot()).toBe(before);
    const answer = await h.request('POST', `/v1/approvals/${key}/reject`, {
      key: h.keys.operator,
      body: { reason: 'customer is not owed this credit' },
    });
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ status: 'rejected', reason: 'customer is not owed this credit' });
    await h.runtime.drive(TENANT, runId);
    expect((await h.store.runs.get(TENANT, runId))?.status).toBe('completed');
    expect(h.fixtures.downstream.credits).not.toContain(key);
    expect(await h.store.ledger.get(TENANT, key)).toBeUndefined();
  });

  it('of 10 concurrent decisions exactly one wins; the others are 409 with the approval as it stands', async () => {
    const { key } = await waiting();
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        h.request('POST', `/v1/approvals/${key}/${i % 2 === 0 ? 'approve' : 'reject'}`, {
          key: h.keys.operator,
          body: { reason: `operator ${i}` },
        }),
      ),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([200, ...Array<number>(9).fill(409)]);
    const winner = answers.find((a) => a.status === 200)!;
    for (const loser of answers.filter((a) => a.status === 409)) {
      expect(loser.body.error.code).toBe('APPROVAL_ALREADY_DECIDED');
      expect(loser.body.approval).toMatchObject({ status: winner.body.status, reason: winner.body.reason });
    }
    const runEvents = await h.store.runs.events(TENANT, key.split(':')[0]!, 0, 100);
    expect(runEvents.filter((e) => e.type === 'approval.decided')).toHaveLength(1);
  });

  /** `oncely_tool_call_repeats_total` of issue_credit with this decision, as /metrics says now. */
  async function repeatsCounted(decision: string): Promise<number> {
    const text = (await h.request('GET', '/metrics')).text;
    const line = text
      .split('\n')
      .find((l) =>
        l.startsWith(`oncely_tool_call_repeats_total{tool="issue_credit",decision="${decision}"}`),
      );
    return line === undefined ? 0 : Number(line.split(' ').at(-1));
  }

  it('a repeat names the earlier call and shows it as it stands, read once a page; /metrics counts it', async () => {
    const t = await h.newTenant();
    const askedBefore = await repeatsCounted('ask');
    const runs = [
      await h.drivenRun('repeat-agent', t.tenantId),
      await h.drivenRun('repeat-agent', t.tenantId),
    ];
    expect(await repeatsCounted('ask')).toBe(askedBefore + 2);
    const plain = await waiting(t.tenantId);
    const pairs = await Promise.all(
      runs.map(async (runId) => {
        const [approval] = await h.store.runs.approvalsOfRun(t.tenantId, runId);
        const [earlier] = await h.store.ledger.list(t.tenantId, {
          runId,
          statuses: ['completed'],
          limit: 10,
        });
        expect(approval?.repeatOf).toBe(earlier!.idempotencyKey);
        return { key: approval!.idempotencyKey, first: earlier!.idempotencyKey };
      }),
    );
    const args = { accountId: 'acct_1', amountCents: 2500 };
    const shown = (key: string, first: string, status: string) => ({
      idempotency_key: key,
      status: 'pending',
      tool_name: 'issue_credit',
      args,
      repeat_of: first,
      earlier: {
        idempotency_key: first,
        tool_name: 'issue_credit',
        status,
        args,
        result: { receipt: `cr_${first}` },
        result_reference: `cr_${first}`,
      },
    });

    const getMany = vi.spyOn(h.store.ledger, 'getMany');
    try {
      const list = await h.request('GET', '/v1/approvals', { key: t.viewer });
      expect(list.status).toBe(200);
      expect(list.body.items).toMatchObject([
        ...pairs.map((p) => shown(p.key, p.first, 'completed')),
        { idempotency_key: plain.key, repeat_of: null, earlier: null },
      ]);
      expect(getMany).toHaveBeenCalledTimes(1);
    } finally {
      getMany.mockRestore();
    }

    // The earlier call as it stands now: undone, the approval shows it compensated.
    const [a, b] = pairs;
    const undone = await h.request('POST', `/v1/tool-executions/${a!.first}/compensate`, {
      key: t.operator,
      body: { reason: 'credited twice' },
    });
    expect(undone.body.status).toBe('compensated');
    const pending = await h.request('GET', '/v1/approvals?status=pending', { key: t.viewer });
    expect(pending.body.items[0]).toMatchObject(shown(a!.key, a!.first, 'compensated'));

    // The decision's answer carries both calls too; the approved repeat is counted as approved.
    const approvedBefore = await repeatsCounted('approved');
    const approved = await h.request('POST', `/v1/approvals/${b!.key}/approve`, {
      key: t.operator,
      body: {},
    });
    expect(approved.body).toMatchObject({ ...shown(b!.key, b!.first, 'completed'), status: 'approved' });
    await h.runtime.drive(t.tenantId, runs[1]!);
    expect((await h.store.runs.get(t.tenantId, runs[1]!))?.status).toBe('completed');
    expect(await repeatsCounted('approved')).toBe(approvedBefore + 1);
  });

  it("answers 404 for another tenant's approval and changes nothing", async () => {
    const { key } = await waiting();
    const before = await h.snapshot();
    const answer = await h.request('POST', `/v1/approvals/${key}/approve`, {
      key: h.keys.otherOperator,
      body: {},
    });
    expect(answer.status).toBe(404);
    expect(answer.body.error.code).toBe('APPROVAL_NOT_FOUND');
    expect(await h.snapshot()).toBe(before);
  });
});
