import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent, defineTool, openRuntime, scriptedModel, write, type Runtime } from '../../src/index.js';
import { startWorker, type Worker, type WorkerLog } from '../../src/worker/index.js';
import { waitFor } from '../support/processes.js';
import { openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * Wake-ups on PostgreSQL (LISTEN/NOTIFY): a worker that would poll once a minute claims a queued run
 * at once, and keeps doing so after its listening connection is terminated under it (it reconnects;
 * meanwhile polling would still finish every run). Real PostgreSQL, a real terminated backend.
 */

const POLL_MS = 60_000;
/** Far below the poll: a run claimed within it was woken, not polled for. */
const WOKEN_WITHIN_MS = 10_000;

class Lines implements WorkerLog {
  readonly lines: string[] = [];
  info(_fields: Record<string, unknown>, message: string): void {
    this.lines.push(message);
  }
  warn(_fields: Record<string, unknown>, message: string): void {
    this.lines.push(message);
  }
  error(_fields: Record<string, unknown>, message: string): void {
    this.lines.push(message);
  }
  count(message: string): number {
    return this.lines.filter((l) => l.startsWith(message)).length;
  }
}

describe('wake-ups over LISTEN/NOTIFY on postgres', () => {
  let opened: OpenedStore;
  let runtime: Runtime;
  let worker: Worker | undefined;
  const effects: string[] = [];
  beforeEach(async () => {
    opened = await openTestStore('postgres', 'wakeups');
    effects.length = 0;
    const note = defineTool({
      name: 'note',
      description: 'Write a note',
      input: z.object({ text: z.string() }),
      effect: write(),
      execute: (_args, ctx) => {
        effects.push(ctx.idempotencyKey);
        return { ok: true };
      },
    });
    const agent = defineAgent({
      name: 'noter',
      instructions: 'Write one note.',
      model: scriptedModel([
        { toolCalls: [{ toolName: 'note', input: { text: 'hi' } }] },
        { text: 'Noted.' },
      ]),
      tools: [note],
    });
    runtime = await openRuntime({ store: opened.store, agents: [agent] });
  });
  afterEach(async () => {
    await worker?.stop();
    await runtime.close();
    await opened.cleanup();
  });

  async function completedWithin(runId: string, ms: number): Promise<number> {
    const started = Date.now();
    await waitFor(
      `run ${runId} to complete`,
      async () => ((await runtime.getRun('acme', runId)).status === 'completed' ? true : undefined),
      ms,
      20,
    );
    return Date.now() - started;
  }

  it('claims a queued run at once, and again after its listening connection is terminated', async () => {
    const log = new Lines();
    worker = startWorker(runtime, { pollMs: POLL_MS, sweepMs: POLL_MS, log });
    await waitFor(
      'the worker to listen',
      () => Promise.resolve(log.count('listening for wake-ups') > 0 || undefined),
      10_000,
    );
    // Its first look for work is done; the next poll is a minute away.
    await new Promise((resolve) => setTimeout(resolve, 200));

    await runtime.startRun({ tenantId: 'acme', agent: 'noter', input: 'go', runId: 'woken-1' });
    expect(await completedWithin('woken-1', WOKEN_WITHIN_MS)).toBeLessThan(WOKEN_WITHIN_MS);

    // The listening backend is terminated (as a failover or an idle-connection killer would).
    const admin = new pg.Client({ connectionString: opened.url });
    await admin.connect();
    try {
      const { rows } = await admin.query<{ terminated: boolean }>(
        `SELECT pg_terminate_backend(pid) AS terminated FROM pg_stat_activity
         WHERE datname = current_database() AND query = 'LISTEN oncely_wake'`,
      );
      expect(rows.map((r) => r.terminated)).toEqual([true]);
    } finally {
      await admin.end();
    }
    await waitFor(
      'the loss to be noticed',
      () => Promise.resolve(log.count('lost the wake-up connection') > 0 || undefined),
      10_000,
    );
    await waitFor(
      'it to listen again',
      () => Promise.resolve(log.count('listening for wake-ups') > 1 || undefined),
      10_000,
    );

    await runtime.startRun({ tenantId: 'acme', agent: 'noter', input: 'go', runId: 'woken-2' });
    expect(await completedWithin('woken-2', WOKEN_WITHIN_MS)).toBeLessThan(WOKEN_WITHIN_MS);
    expect(effects).toHaveLength(2);
    expect(new Set(effects).size).toBe(2);
  });

  it('without wake-ups, the same worker waits for its poll', async () => {
    const log = new Lines();
    worker = startWorker(runtime, { pollMs: 1500, sweepMs: POLL_MS, log, wakeups: false });
    await new Promise((resolve) => setTimeout(resolve, 200));
    await runtime.startRun({ tenantId: 'acme', agent: 'noter', input: 'go', runId: 'polled-1' });
    await completedWithin('polled-1', WOKEN_WITHIN_MS);
    expect(log.count('listening for wake-ups')).toBe(0);
    expect(effects).toHaveLength(1);
  });
});
