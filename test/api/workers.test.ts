/* eslint-disable @typescript-eslint/no-unsafe-member-access -- HTTP answers are JSON of no static type, read by assertions */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WorkerBeat } from '../../src/store/index.js';
import { startWorker } from '../../src/worker/index.js';
import { OncelyProcess } from '../support/processes.js';
import { DIALECTS, OTHER_TENANT, TENANT, ApiHarness } from './support/harness.js';

const beat = (workerId: string, extra: Partial<WorkerBeat> = {}): WorkerBeat => ({
  workerId,
  kind: 'worker',
  host: 'node-a',
  pid: 101,
  concurrency: 4,
  version: '0.1.0',
  stopping: false,
  ...extra,
});

describe.each(DIALECTS)('workers over HTTP and the CLI on %s', (dialect) => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  it('GET /v1/workers lists each worker with its heartbeat and the runs of your tenant it holds', async () => {
    const mine = h.nextId('held');
    const theirs = h.nextId('held');
    const checkpoint = { messages: [], step: 0, pending: null };
    await h.store.runs.create({ tenantId: TENANT, runId: mine, agent: 'a', input: 'x', checkpoint });
    await h.store.runs.create({ tenantId: OTHER_TENANT, runId: theirs, agent: 'a', input: 'x', checkpoint });
    await h.store.runs.claim(TENANT, mine, 'wk-1', 60_000);
    await h.store.runs.claim(OTHER_TENANT, theirs, 'wk-1', 60_000);
    await h.store.workers.heartbeat(beat('wk-1'));
    await h.store.workers.heartbeat(beat('wk-2', { kind: 'serve', host: 'node-b', stopping: true }));

    const listed = await h.request('GET', '/v1/workers', { key: h.keys.admin });
    expect(listed.status).toBe(200);
    const byId = new Map((listed.body.items as { worker_id: string }[]).map((w) => [w.worker_id, w]));
    expect(byId.get('wk-1')).toMatchObject({
      kind: 'worker',
      host: 'node-a',
      pid: 101,
      live: true,
      stopping: false,
      runs: [{ run_id: mine, agent: 'a', lease_epoch: 1 }],
    });
    expect(byId.get('wk-2')).toMatchObject({ kind: 'serve', live: true, stopping: true, runs: [] });
    const other = await h.request('GET', '/v1/workers', { key: h.keys.otherAdmin });
    const wk1 = (other.body.items as { worker_id: string; runs: { run_id: string }[] }[]).find(
      (w) => w.worker_id === 'wk-1',
    );
    expect(wk1?.runs.map((r) => r.run_id)).toEqual([theirs]);
    expect((await h.request('GET', '/v1/workers', {})).status).toBe(401);

    // The CLI shows the same, as a table and as JSON.
    const env = { ONCELY_API_URL: h.base, ONCELY_API_KEY: h.keys.admin };
    const table = new OncelyProcess(['workers'], env);
    expect((await table.exit(20_000)).code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(
      /WORKER\s+KIND\s+STATE\s+HEARTBEAT\s+UP\s+CONCURRENCY\s+VERSION\s+YOUR RUNS/,
    );
    expect(table.stdout).toMatch(new RegExp(`wk-1\\s+worker\\s+live\\s+.*${mine}`));
    expect(table.stdout).toMatch(/wk-2\s+serve\s+stopping/);
    const json = new OncelyProcess(['workers', '--json'], env);
    expect((await json.exit(20_000)).code).toBe(0);
    expect((JSON.parse(json.stdout) as { items: unknown[] }).items).toEqual(listed.body.items);
    await h.store.workers.remove('wk-1');
    await h.store.workers.remove('wk-2');
  });

  it('shows where workers run (worker id, host, pid) to admins only; a viewer or operator sees the rest', async () => {
    const mine = h.nextId('held');
    const checkpoint = { messages: [], step: 0, pending: null };
    await h.store.runs.create({ tenantId: TENANT, runId: mine, agent: 'a', input: 'x', checkpoint });
    await h.store.runs.claim(TENANT, mine, 'node-c:4242', 60_000);
    await h.store.workers.heartbeat(beat('node-c:4242', { host: 'node-c', pid: 4242 }));
    try {
      for (const key of [h.keys.viewer, h.keys.operator]) {
        const listed = await h.request('GET', '/v1/workers', { key });
        expect(listed.status).toBe(200);
        expect(listed.text).not.toMatch(/node-c|4242/);
        const held = (listed.body.items as { runs: { run_id: string }[] }[]).find((w) =>
          w.runs.some((r) => r.run_id === mine),
        );
        expect(held).toMatchObject({ worker_id: null, host: null, pid: null, kind: 'worker', live: true });
      }
      const admin = await h.request('GET', '/v1/workers', { key: h.keys.admin });
      expect(
        (admin.body.items as { worker_id: string }[]).find((w) => w.worker_id === 'node-c:4242'),
      ).toMatchObject({
        host: 'node-c',
        pid: 4242,
      });
      // The CLI with a viewer's key says so instead of a name.
      const cli = new OncelyProcess(['workers'], { ONCELY_API_URL: h.base, ONCELY_API_KEY: h.keys.viewer });
      expect((await cli.exit(20_000)).code, cli.stderr).toBe(0);
      expect(cli.stdout).toMatch(new RegExp(`\\(admin only\\)\\s+worker\\s+live\\s+.*${mine}`));
      expect(cli.stdout).not.toMatch(/node-c/);
    } finally {
      await h.store.workers.remove('node-c:4242');
    }
  });

  it('a worker is in the registry from its first heartbeat, seen stopping, and gone once stopped', async () => {
    const worker = startWorker(h.runtime, { concurrency: 2, pollMs: 20, heartbeatMs: 20 });
    const seen = async () =>
      (await h.store.workers.list(TENANT, { liveMs: 60_000 })).find((w) => w.workerId === h.runtime.owner);
    await expect
      .poll(seen, { timeout: 5000 })
      .toMatchObject({ kind: 'worker', concurrency: 2, live: true, stopping: false });
    const first = (await seen())!.lastHeartbeatAt;
    await expect.poll(async () => (await seen())?.lastHeartbeatAt, { timeout: 5000 }).not.toBe(first);
    await worker.stop();
    expect(await seen()).toBeUndefined();
  });
});
