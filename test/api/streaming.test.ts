import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openRuntime } from '../../src/runs/index.js';
import { openStore } from '../../src/store/index.js';
import { DIALECTS, TENANT, ApiHarness } from './support/harness.js';
import { readSse, type SseEvent } from '../support/sse.js';

/*
 * Streamed answers: an agent with `stream: true` sends its model's deltas to the run's event stream
 * as they arrive (`model.delta`, no id), in order, each once, before the durable `model.response`
 * that holds the whole response; a client that resumes with Last-Event-ID gets the whole response of
 * a step it missed, never a part of one. Read by a real SSE client (fetch) from a real server.
 */

const deltasOf = (events: readonly SseEvent[], step: number, type: string): SseEvent[] =>
  events.filter((e) => e.event === 'model.delta' && e.data.step === step && e.data.type === type);

const textOf = (events: readonly SseEvent[], step: number): string =>
  deltasOf(events, step, 'text')
    .map((e) => e.data.text as string)
    .join('');

/** What the durable events say of a step's response. */
const responseOf = (events: readonly SseEvent[], step: number): SseEvent | undefined =>
  events.find((e) => e.event === 'model.response' && (e.data.data as { step: number }).step === step);

describe.each(DIALECTS)('streamed answers on %s', (dialect) => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  const open = (runId: string, lastEventId?: string): Promise<Response> =>
    fetch(`${h.base}/v1/runs/${runId}/events`, {
      headers: {
        authorization: `Bearer ${h.keys.viewer}`,
        ...(lastEventId === undefined ? {} : { 'last-event-id': lastEventId }),
      },
    });

  it('sends text and tool-call deltas in order, each once, before the durable response of their step', async () => {
    const runId = h.nextId('run_stream');
    await h.runtime.startRun({ tenantId: TENANT, agent: 'stream-agent', input: 'credit me', runId });
    const response = await open(runId);
    expect(response.status).toBe(200);
    const reading = readSse(response);
    const run = await h.runtime.drive(TENANT, runId);
    expect(run.status).toBe('completed');
    const events = await reading;

    for (const step of [1, 2]) {
      const stepDeltas = events.filter((e) => e.event === 'model.delta' && e.data.step === step);
      expect(stepDeltas.length).toBeGreaterThan(5);
      // Not durable: no id, so Last-Event-ID stays at the last durable event.
      expect(stepDeltas.every((e) => e.id === undefined)).toBe(true);
      expect(stepDeltas[0]!.data).toMatchObject({ type: 'start', restarted: false, seq: 1 });
      expect(stepDeltas.at(-1)!.data).toMatchObject({ type: 'finish' });
      // In order, each once.
      const seqs = stepDeltas.map((e) => e.data.seq as number);
      expect(seqs).toEqual(seqs.map((_, i) => i + 1));
      // The deltas add up to the response the run kept, and all came before it.
      const durable = responseOf(events, step)!;
      expect(durable.id).toMatch(/^\d+$/);
      expect(textOf(events, step)).toBe((durable.data.data as { text: string }).text);
      expect(events.indexOf(stepDeltas.at(-1)!)).toBeLessThan(events.indexOf(durable));
    }
    expect(textOf(events, 2)).toBe('Done: I credited one dollar to acct_1 just now.');
    expect(deltasOf(events, 1, 'tool-call-start').map((e) => e.data)).toEqual([
      expect.objectContaining({ index: 0, toolName: 'issue_credit' }),
    ]);
    expect(
      JSON.parse(
        deltasOf(events, 1, 'tool-input')
          .map((e) => e.data.text as string)
          .join(''),
      ),
    ).toEqual({ accountId: 'acct_1', amountCents: 100 });
    expect(deltasOf(events, 1, 'text').length).toBeGreaterThan(3);
  });

  it('gives a client that resumes with Last-Event-ID the whole response of a step it missed, no part of one', async () => {
    const runId = h.nextId('run_stream');
    await h.runtime.startRun({ tenantId: TENANT, agent: 'stream-agent', input: 'credit me', runId });
    const driving = h.runtime.drive(TENANT, runId);
    // Leave in the middle of the second step's answer.
    const first = await readSse(await open(runId), {
      until: (events) => deltasOf(events, 2, 'text').length >= 2,
    });
    const lastDurable = first.filter((e) => e.id !== undefined).at(-1)!;
    expect(responseOf(first, 2)).toBeUndefined();
    expect((await driving).status).toBe('completed');
    const resumed = await readSse(await open(runId, lastDurable.id));
    expect(resumed.filter((e) => e.event === 'model.delta')).toEqual([]);
    expect((responseOf(resumed, 2)!.data.data as { text: string }).text).toBe(
      'Done: I credited one dollar to acct_1 just now.',
    );
    expect(Number(resumed[0]!.id)).toBe(Number(lastDurable.id) + 1);
  });

  it.runIf(dialect === 'postgres')(
    'streams the deltas of a run another process drives (NOTIFY to the watching API process)',
    async () => {
      const other = await openStore(h.url);
      const worker = await openRuntime({ store: other, agents: h.fixtures.agents, owner: 'other-worker' });
      try {
        const runId = h.nextId('run_stream');
        await h.runtime.startRun({ tenantId: TENANT, agent: 'stream-agent', input: 'credit me', runId });
        const response = await open(runId);
        const reading = readSse(response);
        // The API's watch is in place once its stream has read once; then the other process drives.
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect((await worker.drive(TENANT, runId)).status).toBe('completed');
        const events = await reading;
        // Across processes a delta may reach this server after the response it belongs to was read
        // (then the client has the whole response and the delta is dropped): what was sent of each
        // step is its stream from the start, in order.
        for (const step of [1, 2]) {
          const sent = events.filter((e) => e.event === 'model.delta' && e.data.step === step);
          expect(sent.length).toBeGreaterThan(5);
          expect(sent.map((e) => e.data.seq)).toEqual(sent.map((_, i) => i + 1));
          expect(sent.every((e) => e.data.origin === undefined && e.data.epoch === 1)).toBe(true);
          const whole = (responseOf(events, step)!.data.data as { text: string }).text;
          expect(whole.startsWith(textOf(events, step))).toBe(true);
          expect(textOf(events, step).length).toBeGreaterThan(10);
        }
      } finally {
        await worker.close();
        await other.close();
      }
    },
  );
});
