/* eslint-disable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-argument -- HTTP answers are JSON of no static type, read by assertions */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executeToolCall } from '../../src/calls/index.js';
import type { LedgerEvent } from '../../src/ledger/index.js';
import { DIALECTS, TENANT, ApiHarness } from './support/harness.js';

const EMPTY = { messages: [], step: 0, pending: null };

describe.each(DIALECTS)('tool executions over HTTP on %s', (dialect) => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  const keyPath = (key: string, action = ''): string =>
    `/v1/tool-executions/${encodeURIComponent(key)}${action === '' ? '' : `/${action}`}`;
  const history = (key: string, tenantId = TENANT): Promise<LedgerEvent[]> =>
    h.store.ledger.history(tenantId, key);

  describe('GET /v1/tool-executions', () => {
    it('lists the unknown calls by default: indeterminate, and started ones no live worker holds, longest waiting first', async () => {
      const t = await h.newTenant();
      const heldRun = h.nextId('run_held');
      await h.store.runs.create({
        tenantId: t.tenantId,
        runId: heldRun,
        agent: 'x',
        input: 'x',
        checkpoint: EMPTY,
      });
      await h.store.runs.claim(t.tenantId, heldRun, 'another-worker', 60_000);
      const expiredRun = h.nextId('run_expired');
      await h.store.runs.create({
        tenantId: t.tenantId,
        runId: expiredRun,
        agent: 'x',
        input: 'x',
        checkpoint: EMPTY,
      });
      await h.store.runs.claim(t.tenantId, expiredRun, 'dead-worker', 1);

      const indeterminate = await h.seedCall('indeterminate', { tenantId: t.tenantId });
      await sleep(3);
      const orphan = await h.seedCall('started', { tenantId: t.tenantId });
      await sleep(3);
      const held = await h.seedCall('started', { tenantId: t.tenantId, runId: heldRun });
      await sleep(3);
      const expired = await h.seedCall('started', { tenantId: t.tenantId, runId: expiredRun });
      const done = await h.seedCall('completed', { tenantId: t.tenantId });
      await h.seedCall('indeterminate'); // another tenant's

      const answer = await h.request('GET', '/v1/tool-executions', { key: t.viewer });
      expect(answer.status).toBe(200);
      const keys = (answer.body.items as { idempotency_key: string }[]).map((r) => r.idempotency_key);
      expect(keys).toEqual([indeterminate, orphan, expired].map((r) => r.idempotencyKey));
      expect(keys).not.toContain(held.idempotencyKey);
      expect(answer.body.next_cursor).toBeNull();
      expect(answer.body.items[0]).toMatchObject({
        tenant_id: t.tenantId,
        idempotency_key: indeterminate.idempotencyKey,
        status: 'indeterminate',
        tool_name: 'issue_credit',
        args: { accountId: 'acct_1', amountCents: 2500 },
        error: { code: 'TOOL_TIMEOUT', message: 'timed out' },
        attempt_started_at: indeterminate.attemptStartedAt,
      });

      const all = await h.request('GET', '/v1/tool-executions?status=all', { key: t.viewer });
      expect(all.body.items).toHaveLength(5);
      const completed = await h.request('GET', '/v1/tool-executions?status=completed', { key: t.viewer });
      expect(completed.body.items.map((r: { idempotency_key: string }) => r.idempotency_key)).toEqual([
        done.idempotencyKey,
      ]);
      const byRun = await h.request('GET', `/v1/tool-executions?run_id=${expiredRun}`, { key: t.viewer });
      expect(byRun.body.items.map((r: { idempotency_key: string }) => r.idempotency_key)).toEqual([
        expired.idempotencyKey,
      ]);
      const byTool = await h.request('GET', '/v1/tool-executions?tool=slow_write', { key: t.viewer });
      expect(byTool.body.items).toEqual([]);
    });

    it('pages with next_cursor, without skipping or repeating, and refuses a forged cursor', async () => {
      const t = await h.newTenant();
      const made = [];
      for (let i = 0; i < 5; i++)
        made.push((await h.seedCall('indeterminate', { tenantId: t.tenantId })).idempotencyKey);
      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const query: string = cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`;
        const answer = await h.request('GET', `/v1/tool-executions?limit=2${query}`, { key: t.viewer });
        expect(answer.status).toBe(200);
        seen.push(...answer.body.items.map((r: { idempotency_key: string }) => r.idempotency_key));
        cursor = answer.body.next_cursor as string | null;
        pages += 1;
      } while (cursor !== null && pages < 10);
      expect(seen).toEqual(made);
      const forged = Buffer.from(JSON.stringify({ at: "'; DROP TABLE runs; --", key: 'a:b' })).toString(
        'base64url',
      );
      const refused = await h.request('GET', `/v1/tool-executions?cursor=${forged}`, { key: t.viewer });
      expect(refused.status).toBe(400);
      expect(refused.body.error.code).toBe('API_REQUEST_INVALID');
    });
  });

  describe('GET /v1/tool-executions/{key}', () => {
    it('answers the record with its whole history, and 404 for a key of another tenant', async () => {
      const record = await h.seedCall('indeterminate');
      const answer = await h.request('GET', keyPath(record.idempotencyKey), { key: h.keys.viewer });
      expect(answer.status).toBe(200);
      expect(answer.body.record).toMatchObject({
        idempotency_key: record.idempotencyKey,
        status: 'indeterminate',
      });
      expect(answer.body.history.map((e: { via: string; to: string }) => `${e.via}>${e.to}`)).toEqual([
        'reserve>started',
        'outcome>indeterminate',
      ]);
      const other = await h.request('GET', keyPath(record.idempotencyKey), { key: h.keys.otherViewer });
      expect(other.status).toBe(404);
      expect(other.body).toEqual({
        error: { code: 'LEDGER_RECORD_NOT_FOUND', message: expect.stringContaining(record.idempotencyKey) },
      });
    });
  });

  describe('POST /v1/tool-executions/{key}/resolve', () => {
    it("settles an unknown call as the key's actor, once; a second resolve is 409 with the record", async () => {
      const record = await h.seedCall('indeterminate');
      const answer = await h.request('POST', keyPath(record.idempotencyKey, 'resolve'), {
        key: h.keys.operator,
        body: {
          status: 'completed',
          reason: 'found credit cr_9 in the billing console',
          result: { receipt: 'cr_9' },
          result_reference: 'cr_9',
        },
      });
      expect(answer.status).toBe(200);
      expect(answer.body).toMatchObject({
        status: 'completed',
        result: { receipt: 'cr_9' },
        result_reference: 'cr_9',
        settled_by: { kind: 'operator', id: 'ops-ana' },
      });
      const stored = await h.store.ledger.get(TENANT, record.idempotencyKey);
      expect(stored).toMatchObject({
        status: 'completed',
        resultReference: 'cr_9',
        settledBy: { kind: 'operator', id: 'ops-ana' },
      });
      const events = await history(record.idempotencyKey);
      expect(events.at(-1)).toMatchObject({
        kind: 'transition',
        via: 'resolve',
        from: 'indeterminate',
        to: 'completed',
        actor: { kind: 'operator', id: 'ops-ana' },
        reason: 'found credit cr_9 in the billing console',
      });

      const again = await h.request('POST', keyPath(record.idempotencyKey, 'resolve'), {
        key: h.keys.operator,
        body: { status: 'failed', reason: 'second thoughts' },
      });
      expect(again.status).toBe(409);
      expect(again.body.error.code).toBe('LEDGER_ALREADY_SETTLED');
      expect(again.body.record).toMatchObject({
        idempotency_key: record.idempotencyKey,
        status: 'completed',
      });
      expect(await history(record.idempotencyKey)).toEqual(events);

      const line = h.logLines.find(
        (l) => l.msg === 'operator resolved a tool call' && l.idempotencyKey === record.idempotencyKey,
      );
      expect(line).toMatchObject({
        runId: record.runId,
        actorId: 'ops-ana',
        tenantId: TENANT,
        status: 'completed',
      });
    });

    it('of 20 concurrent resolves of one key, exactly one is 200 and the rest 409; one decision is in the history', async () => {
      const record = await h.seedCall('indeterminate');
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          h.request('POST', keyPath(record.idempotencyKey, 'resolve'), {
            key: h.keys.operator,
            body: { status: i % 2 === 0 ? 'completed' : 'failed', reason: `operator ${i} checked` },
          }),
        ),
      );
      const statuses = answers.map((a) => a.status).sort();
      expect(statuses).toEqual([200, ...Array<number>(19).fill(409)]);
      const winner = answers.find((a) => a.status === 200)!;
      for (const loser of answers.filter((a) => a.status === 409)) {
        expect(loser.body.error.code).toBe('LEDGER_ALREADY_SETTLED');
        expect(loser.body.record.status).toBe(winner.body.status);
      }
      const decisions = (await history(record.idempotencyKey)).filter((e) => e.via === 'resolve');
      expect(decisions).toHaveLength(1);
      expect(decisions[0]).toMatchObject({ kind: 'transition', to: winner.body.status });
      expect((await h.store.ledger.get(TENANT, record.idempotencyKey))?.status).toBe(winner.body.status);
    });

    it("keeps the operator's decision when the call's late outcome arrives after it, and records the contradiction as a conflict", async () => {
      const runId = h.nextId('run_late');
      const outcome = await executeToolCall(
        h.runtime.ledger,
        h.fixtures.tools.slowWrite,
        { accountId: 'acct_1' },
        {
          tenantId: TENANT,
          runId,
          toolCallId: 'call_1',
        },
      );
      expect(outcome.status).toBe('unknown');
      const key = `${runId}:call_1`;
      const resolved = await h.request('POST', keyPath(key, 'resolve'), {
        key: h.keys.operator,
        body: { status: 'failed', reason: 'no change in the owner audit log' },
      });
      // Its request may still land: settling it failed now takes force.
      expect([resolved.status, resolved.body.error?.code]).toEqual([409, 'CALL_IN_FLIGHT']);
      const forced = await h.request('POST', keyPath(key, 'resolve'), {
        key: h.keys.operator,
        body: { status: 'failed', reason: 'no change in the owner audit log', force: true },
      });
      expect(forced.status).toBe(200);
      h.fixtures.downstream.release(); // the abandoned attempt answers now: it did take effect
      await h.runtime.ledger.drain();
      const record = await h.store.ledger.get(TENANT, key);
      expect(record).toMatchObject({ status: 'failed', settledBy: { kind: 'operator', id: 'ops-ana' } });
      const shown = await h.request('GET', keyPath(key), { key: h.keys.viewer });
      const events = shown.body.history as {
        kind: string;
        via: string;
        to: string;
        detail: { result?: unknown };
      }[];
      expect(events.map((e) => `${e.kind}:${e.via}>${e.to}`)).toEqual([
        'transition:reserve>started',
        'transition:outcome>indeterminate',
        'transition:resolve>failed',
        'conflict:outcome>completed',
      ]);
      expect(events.at(-1)?.detail.result).toEqual({ changed: true });
      expect(shown.body.record).toMatchObject({ status: 'failed', conflict_at: expect.any(String) });
      const conflicts = await h.request('GET', '/v1/tool-executions?status=conflict', { key: h.keys.viewer });
      expect((conflicts.body.items as { idempotency_key: string }[]).map((r) => r.idempotency_key)).toContain(
        key,
      );
      const metrics = await h.request('GET', '/metrics', { key: h.keys.viewer });
      expect(metrics.text).toMatch(/oncely_ledger_conflicts_total\{tenant="acme"\} [1-9]/);
    });

    it('resumes a run waiting in awaiting_reconciliation once its unknown call is settled', async () => {
      const runId = await h.drivenRun('slow-agent');
      expect((await h.store.runs.get(TENANT, runId))?.status).toBe('awaiting_reconciliation');
      const listed = await h.request('GET', `/v1/tool-executions?run_id=${runId}`, { key: h.keys.viewer });
      expect(listed.body.items).toHaveLength(1);
      const key = listed.body.items[0].idempotency_key as string;
      const answer = await h.request('POST', keyPath(key, 'resolve'), {
        key: h.keys.operator,
        body: { status: 'failed', reason: 'nothing changed downstream; not waiting for it', force: true },
      });
      expect(answer.status).toBe(200);
      expect((await h.store.runs.get(TENANT, runId))?.status).toBe('queued');
      await h.runtime.drive(TENANT, runId);
      expect((await h.store.runs.get(TENANT, runId))?.status).toBe('completed');
    });
  });

  describe('POST /v1/tool-executions/{key}/compensate', () => {
    it('runs the compensation hook once even when two requests arrive at the same moment', async () => {
      const record = await h.seedCall('completed');
      const before = h.fixtures.downstream.refunds.length;
      const answers = await Promise.all(
        [h.keys.operator, h.keys.admin].map((key) =>
          h.request('POST', keyPath(record.idempotencyKey, 'compensate'), {
            key,
            body: { reason: 'credited the wrong account' },
          }),
        ),
      );
      expect(answers.map((a) => a.status)).toEqual([200, 200]);
      await sleep(50);
      expect(h.fixtures.downstream.refunds.slice(before)).toEqual([`${record.idempotencyKey}:compensation`]);
      const compensation = await h.store.ledger.get(TENANT, `${record.idempotencyKey}:compensation`);
      expect(compensation).toMatchObject({
        status: 'completed',
        compensationOf: record.idempotencyKey,
        attempt: 1,
      });
      expect(await h.store.ledger.get(TENANT, record.idempotencyKey)).toMatchObject({
        status: 'compensated',
      });
      const reserves = (await history(`${record.idempotencyKey}:compensation`)).filter(
        (e) => e.via === 'reserve',
      );
      expect(reserves).toHaveLength(1);
      expect(answers.some((a) => a.body.status === 'compensated')).toBe(true);

      const again = await h.request('POST', keyPath(record.idempotencyKey, 'compensate'), {
        key: h.keys.operator,
        body: { reason: 'once more' },
      });
      expect(again.status).toBe(200);
      expect(again.body).toMatchObject({ status: 'compensated', compensation: { status: 'completed' } });
      expect(h.fixtures.downstream.refunds.slice(before)).toHaveLength(1);
    });

    it('answers 409 for a call that is not completed or whose tool has no compensation hook, running nothing', async () => {
      const unknown = await h.seedCall('indeterminate');
      const noHook = await h.seedCall('completed', { toolName: 'slow_write' });
      const before = await h.snapshot();
      for (const record of [unknown, noHook]) {
        const answer = await h.request('POST', keyPath(record.idempotencyKey, 'compensate'), {
          key: h.keys.operator,
          body: { reason: 'undo it' },
        });
        expect(answer.status).toBe(409);
        expect(answer.body.error.code).toBe('LEDGER_NOT_COMPENSABLE');
      }
      expect(await h.snapshot()).toBe(before);
    });
  });
});
