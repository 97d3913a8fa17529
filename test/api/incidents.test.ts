/* eslint-disable @typescript-eslint/no-unsafe-member-access -- HTTP answers are JSON of no static type, read by assertions */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS, OTHER_TENANT, TENANT, ApiHarness } from './support/harness.js';

/*
 * Incidents over HTTP: unknown calls grouped by tool and downstream and searched by argument value;
 * several settled together (each its own compare-and-set, the ones that moved on listed); a call's
 * reconcile hook asked now. Real server, real stores.
 */
describe.each(DIALECTS)('incidents over HTTP on %s', (dialect) => {
  let h: ApiHarness;
  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  const get = (path: string, key = h.keys.viewer) => h.request('GET', path, { key });
  const post = (path: string, body: unknown, key = h.keys.operator) => h.request('POST', path, { key, body });

  it('groups unknown calls by tool and downstream, and finds them by key, run or argument value', async () => {
    const t = await h.newTenant();
    const credits = [
      await h.seedCall('indeterminate', { tenantId: t.tenantId }),
      await h.seedCall('started', { tenantId: t.tenantId }),
    ];
    const checked = await h.seedCall('indeterminate', { tenantId: t.tenantId, toolName: 'checked_credit' });
    await h.seedCall('completed', { tenantId: t.tenantId });

    const all = await get('/v1/incidents', t.viewer);
    expect(all.status, all.text).toBe(200);
    expect(all.body).toMatchObject({ tenant_id: t.tenantId, q: null, unknown: 3, matched: 3, capped: false });
    const groups = all.body.groups as {
      tool_name: string;
      downstream: string | null;
      count: number;
      can_ask_hook: boolean;
      calls: { idempotency_key: string }[];
    }[];
    expect(groups.map((g) => [g.tool_name, g.downstream, g.count, g.can_ask_hook]).sort()).toEqual([
      ['checked_credit', 'billing', 1, true],
      ['issue_credit', null, 2, false],
    ]);
    const issue = groups.find((g) => g.tool_name === 'issue_credit')!;
    expect(issue.calls.map((c) => c.idempotency_key).sort()).toEqual(
      credits.map((c) => c.idempotencyKey).sort(),
    );

    // Every word must match: a key, a run, an argument value (the seeded calls credit acct_1 2500).
    const byKey = await get(`/v1/incidents?q=${encodeURIComponent(checked.idempotencyKey)}`, t.viewer);
    expect(byKey.body.matched).toBe(1);
    expect(byKey.body.groups[0].calls[0].idempotency_key).toBe(checked.idempotencyKey);
    const byArgs = await get('/v1/incidents?q=ACCT_1%202500', t.viewer);
    expect(byArgs.body.matched).toBe(3);
    const byDownstream = await get('/v1/incidents?q=billing', t.viewer);
    expect(byDownstream.body.matched).toBe(1);
    const none = await get('/v1/incidents?q=acct_1%20acct_999', t.viewer);
    expect(none.body).toMatchObject({ matched: 0, unknown: 3, groups: [] });
    const tool = await get('/v1/incidents?tool=checked_credit', t.viewer);
    expect(tool.body.unknown).toBe(1);

    // Another tenant sees none of them.
    const other = await get('/v1/incidents', h.keys.otherViewer);
    expect(other.body.tenant_id).toBe(OTHER_TENANT);
    expect(other.text).not.toContain(t.tenantId);
  });

  it('settles calls together with one reason: each by compare-and-set, the ones that moved on listed and left alone', async () => {
    const t = await h.newTenant();
    const a = await h.seedCall('indeterminate', { tenantId: t.tenantId });
    const b = await h.seedCall('started', { tenantId: t.tenantId });
    const taken = await h.seedCall('indeterminate', { tenantId: t.tenantId });
    // Another operator settled one of them first.
    const first = await post(
      `/v1/tool-executions/${taken.idempotencyKey}/resolve`,
      { status: 'completed', reason: 'found it' },
      t.operator,
    );
    expect(first.status).toBe(200);
    const missing = `${a.runId}:call_not_there`;

    const answer = await post(
      '/v1/tool-executions/resolve',
      {
        keys: [a.idempotencyKey, b.idempotencyKey, taken.idempotencyKey, missing],
        status: 'failed',
        reason: 'the partner had an outage: none arrived',
      },
      t.operator,
    );
    expect(answer.status, answer.text).toBe(200);
    expect(answer.body.tenant_id).toBe(t.tenantId);
    expect(
      (answer.body.settled as { idempotency_key: string; status: string }[])
        .map((r) => [r.idempotency_key, r.status])
        .sort(),
    ).toEqual(
      [
        [a.idempotencyKey, 'failed'],
        [b.idempotencyKey, 'failed'],
      ].sort(),
    );
    const moved = answer.body.moved_on as {
      idempotency_key: string;
      code: string;
      record: { status: string } | null;
    }[];
    expect(moved.map((m) => [m.idempotency_key, m.code, m.record?.status ?? null])).toEqual([
      [taken.idempotencyKey, 'LEDGER_ALREADY_SETTLED', 'completed'],
      [missing, 'LEDGER_RECORD_NOT_FOUND', null],
    ]);

    // Each settled call's history names the operator, the reason and the batch; the taken one is untouched.
    for (const key of [a.idempotencyKey, b.idempotencyKey]) {
      const history = (await get(`/v1/tool-executions/${key}`, t.viewer)).body.history as {
        to: string;
        actor: { id: string };
        reason: string;
        detail: unknown;
      }[];
      expect(history.at(-1)).toMatchObject({
        to: 'failed',
        actor: { kind: 'operator', id: `operator-of-${t.tenantId}` },
        reason: 'the partner had an outage: none arrived',
        detail: { together: { id: answer.body.together as string, size: 4 } },
      });
    }
    const stands = (await get(`/v1/tool-executions/${taken.idempotencyKey}`, t.viewer)).body as {
      record: unknown;
      history: unknown[];
    };
    expect(stands.record).toMatchObject({ status: 'completed', version: 3 });
    expect(stands.history.length).toBe(3);

    // Two operators settling the same calls together at once: each call settled exactly once.
    const c = await h.seedCall('indeterminate', { tenantId: t.tenantId });
    const d = await h.seedCall('indeterminate', { tenantId: t.tenantId });
    const both = await Promise.all(
      ['completed', 'failed'].map((status) =>
        post(
          '/v1/tool-executions/resolve',
          { keys: [c.idempotencyKey, d.idempotencyKey], status, reason: `checked: ${status}` },
          t.operator,
        ),
      ),
    );
    expect(both.map((r) => r.status)).toEqual([200, 200]);
    const settledCount = both.reduce((n, r) => n + (r.body.settled as unknown[]).length, 0);
    const movedCount = both.reduce((n, r) => n + (r.body.moved_on as unknown[]).length, 0);
    expect([settledCount, movedCount]).toEqual([2, 2]);
    for (const key of [c.idempotencyKey, d.idempotencyKey]) {
      const history = (await get(`/v1/tool-executions/${key}`, t.viewer)).body.history as {
        actor: { kind: string };
      }[];
      expect(history.filter((e) => e.actor.kind === 'operator')).toHaveLength(1);
    }
  });

  it('refuses a bad batch before writing anything', async () => {
    const t = await h.newTenant();
    const a = await h.seedCall('indeterminate', { tenantId: t.tenantId });
    const before = await h.snapshot(t.tenantId);
    for (const body of [
      { keys: [], status: 'failed', reason: 'x' },
      { keys: [a.idempotencyKey], status: 'failed', reason: '   ' },
      { keys: [a.idempotencyKey, 'not a key'], status: 'failed', reason: 'x' },
      { keys: Array.from({ length: 101 }, (_, i) => `r:c${i}`), status: 'failed', reason: 'x' },
    ]) {
      const answer = await post('/v1/tool-executions/resolve', body, t.operator);
      expect(answer.status, JSON.stringify(body).slice(0, 80)).toBe(400);
    }
    expect(await h.snapshot(t.tenantId)).toBe(before);
  });

  it("asks a call's reconcile hook now and records what it says; refuses where there is no hook", async () => {
    const t = await h.newTenant();
    const call = await h.seedCall('indeterminate', { tenantId: t.tenantId, toolName: 'checked_credit' });
    const key = call.idempotencyKey;
    const path = `/v1/tool-executions/${key}/reconcile`;

    // Not in the books yet: the hook cannot tell; a note of who asked, then the hook's note.
    const unsure = await post(path, {}, t.operator);
    expect(unsure.status, unsure.text).toBe(200);
    expect(unsure.body.record).toMatchObject({ status: 'indeterminate', version: call.version });
    expect(unsure.body.said).toMatchObject({
      kind: 'note',
      actor: { kind: 'reconcile' },
      reason: `no credit under ${key} in the books yet`,
    });
    let history = (await get(`/v1/tool-executions/${key}`, t.viewer)).body.history as {
      kind: string;
      actor: { kind: string; id: string };
      reason: string;
    }[];
    expect(history.slice(-2).map((e) => [e.kind, e.actor.kind, e.reason])).toEqual([
      ['note', 'operator', 'asked the reconcile hook now'],
      ['note', 'reconcile', `no credit under ${key} in the books yet`],
    ]);

    // The credit is in the books: asked again, the hook settles it completed with its reference.
    h.fixtures.downstream.credits.push(key);
    const found = await post(path, {}, t.operator);
    expect(found.status, found.text).toBe(200);
    expect(found.body.record).toMatchObject({
      status: 'completed',
      result_reference: `ck_${key}`,
      settled_by: { kind: 'reconcile' },
    });
    expect(found.body.said).toMatchObject({ kind: 'transition', from: 'indeterminate', to: 'completed' });
    history = (await get(`/v1/tool-executions/${key}`, t.viewer)).body.history as typeof history;
    expect(history.filter((e) => e.actor.kind === 'operator').map((e) => e.actor.id)).toEqual([
      `operator-of-${t.tenantId}`,
      `operator-of-${t.tenantId}`,
    ]);

    // Settled now: 409 with the record; a tool without a hook: 409 LEDGER_NOT_RECONCILABLE; a viewer: 403.
    const again = await post(path, {}, t.operator);
    expect([again.status, again.body.error.code, again.body.record?.status]).toEqual([
      409,
      'LEDGER_ALREADY_SETTLED',
      'completed',
    ]);
    const plain = await h.seedCall('indeterminate', { tenantId: t.tenantId });
    const before = await h.snapshot(t.tenantId);
    const noHook = await post(`/v1/tool-executions/${plain.idempotencyKey}/reconcile`, {}, t.operator);
    expect([noHook.status, noHook.body.error.code]).toEqual([409, 'LEDGER_NOT_RECONCILABLE']);
    expect(noHook.body.error.message).toContain('has no reconcile hook');
    const viewer = await post(`/v1/tool-executions/${plain.idempotencyKey}/reconcile`, {}, t.viewer);
    expect(viewer.status).toBe(403);
    expect(await h.snapshot(t.tenantId)).toBe(before);
  });

  it('asking the hook now resumes a run paused on the call once the hook settles it', async () => {
    const runId = h.nextId('checked');
    await h.runtime.startRun({ tenantId: TENANT, agent: 'checked-agent', input: 'go', runId });
    await h.runtime.drive(TENANT, runId);
    const calls = (await get(`/v1/tool-executions?run_id=${runId}&status=all`)).body.items as {
      idempotency_key: string;
      status: string;
    }[];
    expect(calls.map((c) => c.status)).toEqual(['completed']);
    // (A completed call has nothing to ask.)
    const asked = await post(`/v1/tool-executions/${calls[0]!.idempotency_key}/reconcile`, {});
    expect([asked.status, asked.body.error.code]).toEqual([409, 'LEDGER_ALREADY_SETTLED']);
  });
});
