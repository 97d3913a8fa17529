import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, SqliteStore, type Store } from '../../src/store/index.js';
import type { Checkpoint } from '../../src/run-state/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';

type Opened = { store: Store; url: string; cleanup(): Promise<void> };

const STORES: [string, () => Promise<Opened>][] = [
  [
    'sqlite',
    async () => {
      const file = tempSqlitePath('runs');
      const url = `sqlite:${file.path}`;
      const store = await openStore(url, { migrate: true });
      return { store, url, cleanup: async () => (await store.close(), file.cleanup()) };
    },
  ],
  [
    'postgres',
    async () => {
      const db = await createTestDatabase('runs');
      const store = await openStore(db.url, { migrate: true });
      return { store, url: db.url, cleanup: async () => (await store.close(), await db.drop()) };
    },
  ],
];

const EMPTY: Checkpoint = { messages: [], step: 0, pending: null };
let seq = 0;
const runId = (): string => `run_${process.pid}_${++seq}`;

describe.each(STORES)('run storage on %s', (name, open) => {
  let opened: Opened;
  let store: Store;
  let second: Store;

  beforeAll(async () => {
    opened = await open();
    store = opened.store;
    // A second connection (a second process's view) to race against.
    second =
      name === 'sqlite'
        ? await SqliteStore.open(opened.url.slice('sqlite:'.length))
        : await openStore(opened.url);
  });

  afterAll(async () => {
    await second.close();
    await opened.cleanup();
  });

  const create = async (id = runId()) =>
    (
      await store.runs.create({
        tenantId: 't1',
        runId: id,
        agent: 'a',
        input: { q: 'hi' },
        checkpoint: EMPTY,
      })
    ).run;

  it('creates a run once per id; a second create returns the run that stands', async () => {
    const id = runId();
    const first = await store.runs.create({
      tenantId: 't1',
      runId: id,
      agent: 'a',
      input: 'x',
      checkpoint: EMPTY,
    });
    const again = await store.runs.create({
      tenantId: 't1',
      runId: id,
      agent: 'b',
      input: 'y',
      checkpoint: EMPTY,
    });
    expect(first.created).toBe(true);
    expect(again.created).toBe(false);
    expect(again.run).toMatchObject({
      agent: 'a',
      input: 'x',
      status: 'queued',
      checkpointVersion: 1,
      leaseEpoch: 0,
    });
    expect(await store.runs.get('t2', id)).toBeUndefined();
  });

  it('lets exactly one of two connections claim a run, with a new epoch', async () => {
    const run = await create();
    const claims = await Promise.all([
      store.runs.claim('t1', run.runId, 'w1', 30_000),
      second.runs.claim('t1', run.runId, 'w2', 30_000),
    ]);
    const won = claims.filter((c) => c !== undefined);
    expect(won).toHaveLength(1);
    expect(won[0]).toMatchObject({ status: 'running', leaseEpoch: 1 });
  });

  it('fences a stale epoch and a stale checkpoint version out of every write', async () => {
    const run = await create();
    const a = await store.runs.claim('t1', run.runId, 'w1', 1);
    expect(a?.leaseEpoch).toBe(1);
    await new Promise((r) => setTimeout(r, 20)); // the lease (1 ms) has expired
    const b = await second.runs.claim('t1', run.runId, 'w2', 30_000);
    expect(b?.leaseEpoch).toBe(2);
    const stale = { tenantId: 't1', runId: run.runId, leaseEpoch: 1, checkpointVersion: 1 };
    const checkpoint: Checkpoint = { messages: [{ role: 'user', content: 'stale' }], step: 1, pending: null };
    expect(await store.runs.saveCheckpoint({ fence: stale, checkpoint, status: 'running' })).toBeUndefined();
    expect(await store.runs.renewLease(stale, 'w1', 30_000)).toBe(false);
    const fresh = { ...stale, leaseEpoch: 2 };
    expect(await second.runs.saveCheckpoint({ fence: fresh, checkpoint, status: 'running' })).toBe(2);
    // The same version again is stale now.
    expect(await second.runs.saveCheckpoint({ fence: fresh, checkpoint, status: 'running' })).toBeUndefined();
    const now = await store.runs.get('t1', run.runId);
    expect(now).toMatchObject({ checkpointVersion: 2, leaseEpoch: 2, leaseOwner: 'w2' });
    expect(now?.checkpoint.messages).toEqual([{ role: 'user', content: 'stale' }]);
  });

  it('releases the lease on a waiting status, requeues it, and claims it again', async () => {
    const run = await create();
    const claimed = await store.runs.claim('t1', run.runId, 'w1', 30_000);
    const fence = {
      tenantId: 't1',
      runId: run.runId,
      leaseEpoch: claimed?.leaseEpoch ?? -1,
      checkpointVersion: 1,
    };
    const saved = await store.runs.saveCheckpoint({
      fence,
      checkpoint: EMPTY,
      status: 'awaiting_reconciliation',
      reason: 'call run:c1 is unknown',
      events: [{ type: 'run.status', data: { status: 'awaiting_reconciliation' } }],
    });
    expect(saved).toBe(2);
    expect(await store.runs.get('t1', run.runId)).toMatchObject({
      status: 'awaiting_reconciliation',
      leaseOwner: null,
    });
    expect(await store.runs.claim('t1', run.runId, 'w2', 30_000)).toBeUndefined();
    expect((await store.runs.listWaiting('awaiting_reconciliation', 100)).map((r) => r.runId)).toContain(
      run.runId,
    );
    expect(await store.runs.requeue('t1', run.runId, ['awaiting_reconciliation'], 'settled')).toBe(true);
    expect(await store.runs.requeue('t1', run.runId, ['awaiting_reconciliation'], 'settled')).toBe(false);
    expect(await second.runs.claim('t1', run.runId, 'w2', 30_000)).toMatchObject({
      status: 'running',
      leaseEpoch: 2,
    });
    const types = (await store.runs.events('t1', run.runId, 0, 100)).map((e) => e.type);
    expect(types).toEqual(['run.created', 'run.claimed', 'run.status', 'run.status', 'run.claimed']);
  });

  it('pages through the waiting runs in (updatedAt, tenant, run) order', async () => {
    const waiting: string[] = [];
    for (let i = 0; i < 3; i++) {
      const run = await create();
      const claimed = await store.runs.claim('t1', run.runId, 'w1', 30_000);
      const fence = {
        tenantId: 't1',
        runId: run.runId,
        leaseEpoch: claimed?.leaseEpoch ?? -1,
        checkpointVersion: 1,
      };
      expect(await store.runs.saveCheckpoint({ fence, checkpoint: EMPTY, status: 'awaiting_approval' })).toBe(
        2,
      );
      waiting.push(run.runId);
    }
    const seen: string[] = [];
    let after: { at: string; tenantId: string; runId: string } | undefined;
    for (let page = 0; page < 50; page++) {
      const rows = await store.runs.listWaiting('awaiting_approval', 2, after);
      if (rows.length === 0) break;
      seen.push(...rows.map((r) => r.runId));
      const last = rows.at(-1);
      if (last === undefined) break;
      after = { at: last.updatedAt, tenantId: last.tenantId, runId: last.runId };
    }
    expect(seen.filter((id) => waiting.includes(id))).toEqual(waiting);
    expect(new Set(seen).size).toBe(seen.length);
  });

  it('claims the next queued run once across connections', async () => {
    const ids = [await create(), await create(), await create()].map((r) => r.runId);
    const claimed = await Promise.all(
      Array.from({ length: 6 }, (_, i) => (i % 2 === 0 ? store : second).runs.claimNext(`w${i}`, 30_000)),
    );
    const mine = claimed.filter((r) => r !== undefined && ids.includes(r.runId)).map((r) => r?.runId);
    expect(new Set(mine).size).toBe(mine.length);
  });

  it('cancels a non-final run, bumping the epoch so its driver stands down', async () => {
    const run = await create();
    const claimed = await store.runs.claim('t1', run.runId, 'w1', 30_000);
    const cancelled = await second.runs.cancel('t1', run.runId, 'customer asked', 'ops-a');
    expect(cancelled).toMatchObject({ status: 'cancelled', leaseEpoch: (claimed?.leaseEpoch ?? 0) + 1 });
    const fence = {
      tenantId: 't1',
      runId: run.runId,
      leaseEpoch: claimed?.leaseEpoch ?? -1,
      checkpointVersion: 1,
    };
    expect(
      await store.runs.saveCheckpoint({ fence, checkpoint: EMPTY, status: 'completed' }),
    ).toBeUndefined();
    expect(await store.runs.cancel('t1', run.runId, 'again', 'ops-a')).toBeUndefined();
  });

  it('decides an approval once and consumes it once, only for its digest', async () => {
    const run = await create();
    const key = `${run.runId}:call_1`;
    const approval = {
      tenantId: 't1',
      idempotencyKey: key,
      runId: run.runId,
      toolName: 'refund',
      args: { c: 1 },
      argsDigest: 'd1',
    };
    await store.runs.createApprovals([approval]);
    await store.runs.createApprovals([{ ...approval, argsDigest: 'other' }]);
    expect(await store.runs.getApproval('t1', key)).toMatchObject({ status: 'pending', argsDigest: 'd1' });
    const decisions = await Promise.all([
      store.runs.decideApproval('t1', key, 'approved', 'ops-a', null),
      second.runs.decideApproval('t1', key, 'rejected', 'ops-b', 'no'),
    ]);
    expect(decisions.filter((d) => d !== undefined)).toHaveLength(1);
    const decided = await store.runs.getApproval('t1', key);
    if (decided?.status === 'approved') {
      expect(await store.runs.consumeApproval('t1', key, 'other')).toBe(false);
      expect(await store.runs.consumeApproval('t1', key, 'd1')).toBe(true);
      expect(await second.runs.consumeApproval('t1', key, 'd1')).toBe(false);
      expect((await store.runs.getApproval('t1', key))?.status).toBe('consumed');
    } else {
      expect(decided).toMatchObject({ status: 'rejected', decidedBy: 'ops-b', reason: 'no' });
      expect(await store.runs.consumeApproval('t1', key, 'd1')).toBe(false);
    }
    expect((await store.runs.listApprovals('t2', { limit: 10 })).length).toBe(0);
  });

  it('keeps a JSON string value a string, in the ledger and in runs', async () => {
    const id = runId();
    const actor = { kind: 'runtime' as const, id: 'test' };
    const [reserved] = await store.ledger.reserve(
      [
        {
          tenantId: 't1',
          idempotencyKey: `${id}:c1`,
          runId: id,
          toolCallId: 'c1',
          toolName: 'echo',
          effect: 'read',
          args: 'just text',
          argsDigest: 'd',
          compensationOf: null,
          attemptTimeoutMs: 30_000,
        },
      ],
      actor,
    );
    expect(reserved?.record.args).toBe('just text');
    const done = await store.ledger.transition({
      tenantId: 't1',
      idempotencyKey: `${id}:c1`,
      via: 'outcome',
      to: 'completed',
      expect: { status: 'started', version: 1 },
      actor,
      reason: null,
      result: '42',
      recordIgnored: false,
    });
    expect(done.record?.result).toBe('42');
    const run = await create(id);
    expect((await store.runs.get('t1', run.runId))?.input).toEqual({ q: 'hi' });
  });
});
