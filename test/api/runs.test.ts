/* eslint-disable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-call, @typescript-eslint/no-unsafe-assignment -- HTTP answers are JSON of no static type, read by assertions */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApiServer, createApiKey } from '../../src/api/index.js';
import { DIALECTS, TENANT, ApiHarness } from './support/harness.js';
import { readSse } from '../support/sse.js';

interface SseEvent {
  id: number;
  event: string;
  data: { id: number; type: string; data: unknown };
}

/** Reads a server-sent event stream to its end, each run event with its id as a number. */
async function readEvents(response: Response): Promise<SseEvent[]> {
  // Run events carry an id; the server's own notices (stream.closed) only an event name.
  return (await readSse(response)).map((e) => ({
    id: e.id === undefined ? Number.NaN : Number(e.id),
    event: e.event,
    data: e.data as unknown as SseEvent['data'],
  }));
}

describe.each(DIALECTS)('runs over HTTP on %s', (dialect) => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  describe('POST /v1/runs', () => {
    it('creates a queued run (201); the same run id, agent and input again is 200; other input is 409', async () => {
      const runId = h.nextId('run_client');
      const body = { agent: 'credit-agent', input: { message: 'credit acct_1 $25' }, run_id: runId };
      const created = await h.request('POST', '/v1/runs', { key: h.keys.operator, body });
      expect(created.status).toBe(201);
      expect(created.body).toMatchObject({
        run_id: runId,
        agent: 'credit-agent',
        status: 'queued',
        tenant_id: TENANT,
        step: 0,
      });
      const again = await h.request('POST', '/v1/runs', { key: h.keys.operator, body });
      expect(again.status).toBe(200);
      expect(again.body.created_at).toBe(created.body.created_at);
      const before = await h.snapshot();
      const conflict = await h.request('POST', '/v1/runs', {
        key: h.keys.operator,
        body: { ...body, input: 'something else' },
      });
      expect(conflict.status).toBe(409);
      expect(conflict.body.error.code).toBe('RUN_CONFLICT');
      expect(await h.snapshot()).toBe(before);
      const stored = await h.store.runs.get(TENANT, runId);
      expect(stored).toMatchObject({
        status: 'queued',
        agent: 'credit-agent',
        input: { message: 'credit acct_1 $25' },
      });
      const line = h.logLines.find((l) => l.msg === 'run created' && l.runId === runId);
      expect(line).toMatchObject({ actorId: 'ops-ana', tenantId: TENANT });
    });

    it('mints a run id when none is given, and answers 422 for an agent this server does not have', async () => {
      const minted = await h.request('POST', '/v1/runs', {
        key: h.keys.operator,
        body: { agent: 'credit-agent', input: 'hi' },
      });
      expect(minted.status).toBe(201);
      expect(minted.body.run_id).toMatch(/^run_[0-9a-f]{16}$/);
      const before = await h.snapshot();
      const unknown = await h.request('POST', '/v1/runs', {
        key: h.keys.operator,
        body: { agent: 'no-such-agent', input: 'hi' },
      });
      expect(unknown.status).toBe(422);
      expect(unknown.body.error.code).toBe('AGENT_NOT_FOUND');
      expect(await h.snapshot()).toBe(before);
    });
  });

  describe('GET /v1/runs and /v1/runs/{id}', () => {
    it("shows a run and lists the tenant's runs with filters and pages", async () => {
      const t = await h.newTenant();
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const answer = await h.request('POST', '/v1/runs', {
          key: t.operator,
          body: { agent: i === 2 ? 'approval-agent' : 'credit-agent', input: `run ${i}` },
        });
        ids.push(answer.body.run_id as string);
      }
      await h.runtime.drive(t.tenantId, ids[0]!);
      const shown = await h.request('GET', `/v1/runs/${ids[0]}`, { key: t.viewer });
      expect(shown.status).toBe(200);
      expect(shown.body).toMatchObject({
        run_id: ids[0],
        status: 'completed',
        result: { text: 'Done.' },
        step: 2,
      });
      expect(shown.body.pending_calls).toEqual([]);

      const page1 = await h.request('GET', '/v1/runs?limit=2', { key: t.viewer });
      const page2 = await h.request('GET', `/v1/runs?limit=2&cursor=${page1.body.next_cursor}`, {
        key: t.viewer,
      });
      expect([...page1.body.items, ...page2.body.items].map((r: { run_id: string }) => r.run_id)).toEqual(
        ids,
      );
      expect(page2.body.next_cursor).toBeNull();
      const queued = await h.request('GET', '/v1/runs?status=queued&agent=credit-agent', { key: t.viewer });
      expect(queued.body.items.map((r: { run_id: string }) => r.run_id)).toEqual([ids[1]]);
      const other = await h.request('GET', `/v1/runs/${ids[0]}`, { key: h.keys.viewer });
      expect(other.status).toBe(404);
      expect(other.body.error.code).toBe('RUN_NOT_FOUND');
    });
  });

  describe('POST /v1/runs/{id}/cancel', () => {
    it('cancels a run that has not ended (with the reason and actor in its events); a final run is 409', async () => {
      const runId = await h.drivenRun('approval-agent');
      expect((await h.store.runs.get(TENANT, runId))?.status).toBe('awaiting_approval');
      const cancelled = await h.request('POST', `/v1/runs/${runId}/cancel`, {
        key: h.keys.operator,
        body: { reason: 'customer withdrew the request' },
      });
      expect(cancelled.status).toBe(200);
      expect(cancelled.body).toMatchObject({
        status: 'cancelled',
        status_reason: 'customer withdrew the request',
      });
      const events = await h.store.runs.events(TENANT, runId, 0, 100);
      expect(events.at(-1)).toMatchObject({
        type: 'run.status',
        data: { status: 'cancelled', reason: 'customer withdrew the request', actor: 'ops-ana' },
      });
      const before = await h.snapshot();
      const again = await h.request('POST', `/v1/runs/${runId}/cancel`, {
        key: h.keys.operator,
        body: { reason: 'again' },
      });
      expect(again.status).toBe(409);
      expect(again.body.error.code).toBe('RUN_ALREADY_FINAL');
      expect(await h.snapshot()).toBe(before);
    });
  });

  describe('GET /v1/runs/{id}/events', () => {
    it('streams every event of a finished run in order, numbered 1, 2, 3… in the run, then ends; Last-Event-ID resumes after it', async () => {
      const runId = await h.drivenRun('credit-agent');
      const stored = await h.store.runs.events(TENANT, runId, 0, 1000);
      expect(stored.length).toBeGreaterThan(2);
      const response = await fetch(`${h.base}/v1/runs/${runId}/events`, {
        headers: { authorization: `Bearer ${h.keys.viewer}` },
      });
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const events = await readEvents(response);
      expect(events.map((e) => e.id)).toEqual(stored.map((e) => e.seq));
      expect(events.map((e) => e.event)).toEqual(stored.map((e) => e.type));
      expect(events.map((e) => e.id)).toEqual(stored.map((_, i) => i + 1));
      expect(events.at(-1)?.data).toMatchObject({ type: 'run.status' });

      const middle = stored[1]!.seq;
      const resumed = await fetch(`${h.base}/v1/runs/${runId}/events`, {
        headers: { authorization: `Bearer ${h.keys.viewer}`, 'last-event-id': String(middle) },
      });
      expect((await readEvents(resumed)).map((e) => e.id)).toEqual(stored.slice(2).map((e) => e.seq));
      const byQuery = await fetch(`${h.base}/v1/runs/${runId}/events?after=${middle}`, {
        headers: { authorization: `Bearer ${h.keys.viewer}` },
      });
      expect((await readEvents(byQuery)).map((e) => e.id)).toEqual(stored.slice(2).map((e) => e.seq));
    });

    it('follows a live run: events written after the stream opened arrive on it', async () => {
      const created = await h.request('POST', '/v1/runs', {
        key: h.keys.operator,
        body: { agent: 'credit-agent', input: 'live' },
      });
      const runId = created.body.run_id as string;
      const response = await fetch(`${h.base}/v1/runs/${runId}/events`, {
        headers: { authorization: `Bearer ${h.keys.viewer}` },
      });
      const reading = readEvents(response);
      await new Promise((resolve) => setTimeout(resolve, 150));
      await h.runtime.drive(TENANT, runId);
      const events = await reading;
      const stored = await h.store.runs.events(TENANT, runId, 0, 1000);
      expect(events.map((e) => e.id)).toEqual(stored.map((e) => e.seq));
      expect(events[0]?.event).toBe('run.created');
      expect((await h.store.runs.get(TENANT, runId))?.status).toBe('completed');
    });

    it('ends open streams when the server closes, so closing does not wait for clients', async () => {
      const runId = await h.drivenRun('approval-agent'); // waits: its stream would never end by itself
      const app = await buildApiServer({ runtime: h.runtime, eventPollMs: 50 });
      const base = await app.listen({ host: '127.0.0.1', port: 0 });
      const response = await fetch(`${base}/v1/runs/${runId}/events`, {
        headers: { authorization: `Bearer ${h.keys.viewer}` },
      });
      expect(response.status).toBe(200);
      const reading = readEvents(response);
      const started = Date.now();
      await app.close();
      const events = await reading;
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(events.map((e) => e.event)).toContain('approval.requested');
    });

    it('ends a key’s open streams within a second of its revocation, on every API process', async () => {
      const runId = await h.drivenRun('approval-agent'); // waits: its stream would never end by itself
      const { key, record } = await createApiKey(h.store.apiKeys, {
        tenantId: TENANT,
        actorId: 'watcher',
        role: 'viewer',
      });
      // A second API process on the same database holds the stream; the revocation goes through the first.
      const other = await buildApiServer({ runtime: h.runtime, eventPollMs: 50 });
      const otherBase = await other.listen({ host: '127.0.0.1', port: 0 });
      try {
        const response = await fetch(`${otherBase}/v1/runs/${runId}/events`, {
          headers: { authorization: `Bearer ${key}` },
        });
        expect(response.status).toBe(200);
        const reading = readEvents(response);
        await new Promise((resolve) => setTimeout(resolve, 200));
        const revoked = await h.request('POST', `/v1/api-keys/${record.keyId}/revoke`, { key: h.keys.admin });
        expect(revoked.status).toBe(200);
        const at = Date.now();
        const events = await reading;
        expect(Date.now() - at).toBeLessThan(1_500);
        expect(events.at(-1)?.event).toBe('stream.closed');
        const again = await fetch(`${otherBase}/v1/runs/${runId}/events`, {
          headers: { authorization: `Bearer ${key}` },
        });
        expect(again.status).toBe(401);
        await again.body?.cancel();
      } finally {
        await other.close();
      }
    });

    it('limits the open streams of one key and of the server, answering 429 in the envelope', async () => {
      const runId = await h.drivenRun('approval-agent');
      const limited = await buildApiServer({
        runtime: h.runtime,
        eventPollMs: 50,
        maxStreamsPerKey: 2,
        maxStreams: 3,
      });
      const base = await limited.listen({ host: '127.0.0.1', port: 0 });
      const open = (key: string) =>
        fetch(`${base}/v1/runs/${runId}/events`, { headers: { authorization: `Bearer ${key}` } });
      const held: Response[] = [];
      try {
        held.push(await open(h.keys.viewer), await open(h.keys.viewer));
        expect(held.map((r) => r.status)).toEqual([200, 200]);
        const third = await open(h.keys.viewer);
        expect(third.status).toBe(429);
        expect(await third.json()).toEqual({
          error: { code: 'API_TOO_MANY_STREAMS', message: expect.stringMatching(/this key holds 2/) },
        });
        held.push(await open(h.keys.operator));
        expect(held.at(-1)?.status).toBe(200);
        const overServer = await open(h.keys.admin);
        expect(overServer.status).toBe(429);
        expect(((await overServer.json()) as { error: { message: string } }).error.message).toMatch(
          /this server holds 3/,
        );
        await held.shift()?.body?.cancel(); // one closes: the key may open another
        await new Promise((resolve) => setTimeout(resolve, 100));
        const after = await open(h.keys.viewer);
        expect(after.status).toBe(200);
        held.push(after);
      } finally {
        for (const r of held) await r.body?.cancel().catch(() => undefined);
        await limited.close();
      }
    });

    it("answers 404 for another tenant's run and 400 for a malformed Last-Event-ID", async () => {
      const runId = await h.drivenRun('credit-agent');
      const other = await h.request('GET', `/v1/runs/${runId}/events`, { key: h.keys.otherViewer });
      expect(other.status).toBe(404);
      const bad = await h.request('GET', `/v1/runs/${runId}/events`, {
        key: h.keys.viewer,
        headers: { 'last-event-id': '1; DROP TABLE run_events' },
      });
      expect(bad.status).toBe(400);
      expect(bad.body.error.code).toBe('API_REQUEST_INVALID');
    });
  });

  describe('conversations', () => {
    it('takes the next message of a completed run (201), its repeat (200), and refuses another under that id or too early (409)', async () => {
      const runId = await h.drivenRun('chat-agent');
      const path = `/v1/runs/${runId}/messages`;
      const first = await h.request('GET', `/v1/runs/${runId}`, { key: h.keys.viewer });
      expect(first.body).toMatchObject({
        status: 'completed',
        turn: 1,
        usage: { input_tokens: 250, output_tokens: 15, total_tokens: 265 },
        token_budget: null,
      });
      const body = { client_message_id: 'msg-2', content: [{ type: 'text', text: 'and $3 more' }] };
      const sent = await h.request('POST', path, { key: h.keys.operator, body });
      expect(sent.status, sent.text).toBe(201);
      expect(sent.body).toMatchObject({
        turn: { turn: 2, client_message_id: 'msg-2', message_index: 4, actor_id: 'ops-ana' },
        run: { status: 'queued', turn: 2, result: null },
      });
      const before = await h.snapshot();
      const again = await h.request('POST', path, { key: h.keys.operator, body });
      expect(again.status).toBe(200);
      expect(again.body.turn).toEqual(sent.body.turn);
      const other = await h.request('POST', path, {
        key: h.keys.operator,
        body: { client_message_id: 'msg-2', content: 'something else' },
      });
      expect([other.status, other.body.error.code]).toEqual([409, 'RUN_MESSAGE_CONFLICT']);
      const early = await h.request('POST', path, {
        key: h.keys.operator,
        body: { client_message_id: 'msg-3', content: 'hello?' },
      });
      expect([early.status, early.body.error.code]).toEqual([409, 'RUN_NOT_AWAITING_MESSAGE']);
      expect(await h.snapshot()).toBe(before);

      await h.runtime.drive(TENANT, runId);
      const run = await h.request('GET', `/v1/runs/${runId}`, { key: h.keys.viewer });
      expect(run.body).toMatchObject({
        status: 'completed',
        turn: 2,
        step: 4,
        result: { text: 'Credited, turn 2.' },
        usage: { input_tokens: 500, output_tokens: 30, total_tokens: 530 },
      });
      const model = await h.request('GET', path, { key: h.keys.viewer });
      expect(model.body.format).toBe('model');
      expect(model.body.messages.map((m: { role: string }) => m.role)).toEqual([
        'user',
        'assistant',
        'tool',
        'assistant',
        'user',
        'assistant',
        'tool',
        'assistant',
      ]);
      expect(model.body.turns).toEqual([sent.body.turn]);
      const ui = await h.request('GET', `${path}?format=ui`, { key: h.keys.viewer });
      expect(ui.body.messages.map((m: { role: string }) => m.role)).toEqual([
        'user',
        'assistant',
        'user',
        'assistant',
      ]);
      expect(ui.body.messages[3].parts).toEqual([
        { type: 'step-start' },
        expect.objectContaining({
          type: 'tool-issue_credit',
          state: 'output-available',
          input: { accountId: 'acct_1', amountCents: 300 },
        }),
        { type: 'step-start' },
        { type: 'text', text: 'Credited, turn 2.', state: 'done' },
      ]);
      const bad = await h.request('GET', `${path}?format=html`, { key: h.keys.viewer });
      expect(bad.status).toBe(400);
    });

    it('sums usage by agent for the tenant, in a window, and starts a run with its own token budget', async () => {
      const t = await h.newTenant();
      for (let i = 0; i < 2; i++) {
        const runId = h.nextId('run_usage');
        await h.runtime.startRun({ tenantId: t.tenantId, agent: 'chat-agent', input: 'go', runId });
        await h.runtime.drive(t.tenantId, runId);
      }
      const usage = await h.request('GET', '/v1/usage', { key: t.viewer });
      // Two runs of one step with a call and one answer each: (100 + 10) + (150 + 5) tokens a run.
      const twoRuns = {
        input_tokens: 500,
        output_tokens: 30,
        reasoning_tokens: 0,
        cached_input_tokens: 0,
        total_tokens: 530,
      };
      expect(usage.body).toEqual({
        tenant_id: t.tenantId,
        runs: 2,
        usage: twoRuns,
        by_agent: [{ agent: 'chat-agent', runs: 2, usage: twoRuns }],
      });
      const later = await h.request(
        'GET',
        `/v1/usage?from=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`,
        {
          key: t.viewer,
        },
      );
      expect(later.body.runs).toBe(0);
      const badWindow = await h.request('GET', '/v1/usage?from=yesterday', { key: t.viewer });
      expect(badWindow.status).toBe(400);

      const created = await h.request('POST', '/v1/runs', {
        key: t.operator,
        body: { agent: 'chat-agent', input: 'go', token_budget: 200 },
      });
      expect(created.status).toBe(201);
      expect(created.body.token_budget).toBe(200);
      await h.runtime.drive(t.tenantId, created.body.run_id as string);
      const ended = await h.request('GET', `/v1/runs/${created.body.run_id}`, { key: t.viewer });
      // 110 spent; the next prompt is at least 100: 210 would pass 200.
      expect(ended.body).toMatchObject({
        status: 'failed',
        error: { code: 'RUN_BUDGET_EXCEEDED' },
        usage: { total_tokens: 110 },
      });
    });
  });
});
