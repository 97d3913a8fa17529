import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../../src/store/index.js';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import type { Checkpoint } from '../../src/run-state/index.js';
import { argsDigest, type ToolExecutionRecord } from '../../src/ledger/index.js';
import type { ReserveRequest, TransitionRequest } from '../../src/store/index.js';
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

  it('appends only the new messages at each save; a save that does not start where the run ends writes nothing', async () => {
    const run = await create();
    const claimed = await store.runs.claim('t1', run.runId, 'w1', 30_000);
    let fence = { tenantId: 't1', runId: run.runId, leaseEpoch: claimed!.leaseEpoch, checkpointVersion: 1 };
    const messages: { role: string; content: string }[] = [];
    for (let step = 1; step <= 3; step++) {
      const before = messages.length;
      messages.push(
        { role: 'assistant', content: `step ${step}` },
        { role: 'tool', content: `told ${step}` },
      );
      const checkpoint: Checkpoint = { messages: [...messages], step, pending: null };
      const version = await store.runs.saveCheckpoint({
        fence,
        checkpoint,
        storedMessages: before,
        status: 'running',
      });
      expect(version).toBe(step + 1);
      fence = { ...fence, checkpointVersion: version! };
    }
    const longer: Checkpoint = {
      messages: [...messages, { role: 'user', content: 'more' }],
      step: 4,
      pending: null,
    };
    // One short of what the run holds, or one past it: the fence refuses, nothing is appended.
    for (const stored of [messages.length - 1, messages.length + 1]) {
      expect(
        await second.runs.saveCheckpoint({
          fence,
          checkpoint: longer,
          storedMessages: stored,
          status: 'running',
        }),
      ).toBeUndefined();
    }
    const now = await store.runs.get('t1', run.runId);
    expect(now?.checkpointVersion).toBe(4);
    expect(now?.checkpoint.messages).toEqual(messages);
    // A save that claims more than its own messages is a caller's mistake, refused before writing.
    await expect(
      store.runs.saveCheckpoint({ fence, checkpoint: EMPTY, storedMessages: 1, status: 'running' }),
    ).rejects.toThrow(/conversation only grows/);
    // Lists, the summary and the sweep carry the step and pending calls, never the conversation.
    const summary = await store.runs.summary('t1', run.runId);
    expect(summary?.checkpoint).toEqual({ step: 3, pending: null });
    const listed = (await store.runs.list('t1', { limit: 1_000 })).find((r) => r.runId === run.runId);
    expect(listed?.checkpoint).toEqual({ step: 3, pending: null });
  });

  it('tells who claimed a run, newest first (a worker names the driver it took over from)', async () => {
    const run = await create();
    expect(await store.runs.lastClaims('t1', run.runId, 2)).toEqual([]);
    await store.runs.claim('t1', run.runId, 'w1', 1);
    await new Promise((r) => setTimeout(r, 20)); // the lease (1 ms) has expired
    await second.runs.claim('t1', run.runId, 'w2', 1);
    await new Promise((r) => setTimeout(r, 20));
    await store.runs.claim('t1', run.runId, 'w3', 30_000);
    const claims = await store.runs.lastClaims('t1', run.runId, 2);
    expect(claims.map((c) => [c.type, c.data])).toEqual([
      ['run.claimed', { owner: 'w3', epoch: 3, driveAttempt: 3 }],
      ['run.claimed', { owner: 'w2', epoch: 2, driveAttempt: 2 }],
    ]);
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
    expect(
      await store.runs.saveCheckpoint({ fence: stale, checkpoint, storedMessages: 0, status: 'running' }),
    ).toBeUndefined();
    expect(await store.runs.renewLease(stale, 'w1', 30_000)).toBe(false);
    const fresh = { ...stale, leaseEpoch: 2 };
    expect(
      await second.runs.saveCheckpoint({ fence: fresh, checkpoint, storedMessages: 0, status: 'running' }),
    ).toBe(2);
    // The same version again is stale now.
    expect(
      await second.runs.saveCheckpoint({ fence: fresh, checkpoint, storedMessages: 0, status: 'running' }),
    ).toBeUndefined();
    const now = await store.runs.get('t1', run.runId);
    expect(now).toMatchObject({ checkpointVersion: 2, leaseEpoch: 2, leaseOwner: 'w2' });
    expect(now?.checkpoint.messages).toEqual([{ role: 'user', content: 'stale' }]);
  });

  it('renews the lease with a checkpoint only while this owner holds it unexpired; else saves nothing', async () => {
    const run = await create();
    const claimed = await store.runs.claim('t1', run.runId, 'w1', 1_000);
    const fence = { tenantId: 't1', runId: run.runId, leaseEpoch: claimed!.leaseEpoch, checkpointVersion: 1 };
    const checkpoint: Checkpoint = {
      messages: [{ role: 'user', content: 'renewed' }],
      step: 1,
      pending: null,
    };
    const before = Date.parse((await store.runs.get('t1', run.runId))!.leaseExpiresAt!);
    // Another owner name under the same epoch renews nothing and saves nothing.
    const other = { owner: 'w9', leaseMs: 60_000 };
    expect(
      await store.runs.saveCheckpoint({
        fence,
        checkpoint,
        storedMessages: 0,
        status: 'running',
        renewLease: other,
      }),
    ).toBeUndefined();
    const mine = { owner: 'w1', leaseMs: 60_000 };
    expect(
      await store.runs.saveCheckpoint({
        fence,
        checkpoint,
        storedMessages: 0,
        status: 'running',
        renewLease: mine,
      }),
    ).toBe(2);
    const saved = await store.runs.get('t1', run.runId);
    expect(saved?.checkpoint.messages).toEqual([{ role: 'user', content: 'renewed' }]);
    expect(Date.parse(saved!.leaseExpiresAt!) - before).toBeGreaterThan(50_000);
    // A save by the holder that misses the fence (a version saved over) saves nothing and renews nothing.
    expect(
      await store.runs.saveCheckpoint({
        fence,
        checkpoint,
        storedMessages: 0,
        status: 'running',
        renewLease: { owner: 'w1', leaseMs: 600_000 },
      }),
    ).toBeUndefined();
    expect((await store.runs.get('t1', run.runId))?.leaseExpiresAt).toBe(saved?.leaseExpiresAt);
    // Once the lease has expired it cannot be renewed by a save, even unclaimed by anyone else.
    await store.runs.renewLease(fence, 'w1', 1);
    await new Promise((r) => setTimeout(r, 20));
    const next = { ...fence, checkpointVersion: 2 };
    expect(
      await store.runs.saveCheckpoint({
        fence: next,
        checkpoint,
        storedMessages: 1,
        status: 'running',
        renewLease: mine,
      }),
    ).toBeUndefined();
    expect((await store.runs.get('t1', run.runId))?.checkpointVersion).toBe(2);
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
      storedMessages: 0,
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
    const waiting = (await store.runs.listWaiting('awaiting_reconciliation', 100)).find(
      (r) => r.runId === run.runId,
    );
    // What it waits on, not its conversation.
    expect(waiting).toEqual({
      tenantId: 't1',
      runId: run.runId,
      status: 'awaiting_reconciliation',
      updatedAt: (await store.runs.get('t1', run.runId))?.updatedAt,
      pending: EMPTY.pending,
    });
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
      expect(
        await store.runs.saveCheckpoint({
          fence,
          checkpoint: EMPTY,
          storedMessages: 0,
          status: 'awaiting_approval',
        }),
      ).toBe(2);
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
      await store.runs.saveCheckpoint({ fence, checkpoint: EMPTY, storedMessages: 0, status: 'completed' }),
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
  describe('the step writes', () => {
    const actor = { kind: 'runtime', id: 'w1' } as const;
    const reservation = (id: string, call: string): ReserveRequest => ({
      tenantId: 't1',
      idempotencyKey: `${id}:${call}`,
      runId: id,
      toolCallId: call,
      toolName: 'issue_credit',
      effect: 'external',
      args: { n: call },
      argsDigest: argsDigest({ n: call }),
      compensationOf: null,
      attemptTimeoutMs: 30_000,
    });
    const response: Checkpoint = {
      messages: [{ role: 'user', content: 'go' }],
      step: 1,
      pending: { calls: [] },
    };
    const told: Checkpoint = {
      messages: [...response.messages, { role: 'tool', content: 'told' }],
      step: 1,
      pending: null,
    };
    const completedBy = (record: ToolExecutionRecord): TransitionRequest => ({
      tenantId: 't1',
      idempotencyKey: record.idempotencyKey,
      via: 'outcome',
      to: 'completed',
      expect: { status: record.status, version: record.version },
      actor,
      reason: null,
      result: { ok: record.toolCallId },
      recordIgnored: true,
    });

    /** A claimed run whose response holds the calls c1..c<k>, reserved by reserveStep. */
    async function reservedStep(k: number) {
      const run = await create();
      const claimed = await store.runs.claim('t1', run.runId, 'w1', 30_000);
      const fence = {
        tenantId: 't1',
        runId: run.runId,
        leaseEpoch: claimed!.leaseEpoch,
        checkpointVersion: 1,
      };
      const calls = Array.from({ length: k }, (_, i) => reservation(run.runId, `c${i + 1}`));
      const step = await store.reserveStep({
        save: {
          fence,
          checkpoint: response,
          storedMessages: 0,
          status: 'running',
          events: [{ type: 'model.response', data: { step: 1 } }],
          renewLease: { owner: 'w1', leaseMs: 30_000 },
        },
        reservations: calls,
        actor,
      });
      return { run, fence: { ...fence, checkpointVersion: 2 }, step };
    }

    it('saves a response and reserves its calls in one write; a call that stood is answered as it stands', async () => {
      const run = await create();
      const claimed = await store.runs.claim('t1', run.runId, 'w1', 30_000);
      const fence = {
        tenantId: 't1',
        runId: run.runId,
        leaseEpoch: claimed!.leaseEpoch,
        checkpointVersion: 1,
      };
      const [stood] = await store.ledger.reserve([reservation(run.runId, 'c0')], actor);
      const step = await store.reserveStep({
        save: {
          fence,
          checkpoint: response,
          storedMessages: 0,
          status: 'running',
          renewLease: { owner: 'w1', leaseMs: 30_000 },
        },
        reservations: [
          reservation(run.runId, 'c0'),
          reservation(run.runId, 'c1'),
          reservation(run.runId, 'c2'),
        ],
        actor,
      });
      expect(step?.version).toBe(2);
      expect(step?.reservations.map((r) => [r.kind, r.record.toolCallId, r.record.status])).toEqual([
        ['existing', 'c0', 'started'],
        ['reserved', 'c1', 'started'],
        ['reserved', 'c2', 'started'],
      ]);
      expect(step?.reservations[0]?.record).toEqual(stood?.record);
      expect((await store.runs.get('t1', run.runId))?.checkpoint).toEqual(response);
      const history = await store.ledger.history('t1', `${run.runId}:c1`);
      expect(history.map((e) => [e.kind, e.via, e.to])).toEqual([['transition', 'reserve', 'started']]);
    });

    it('reserves nothing when the response cannot be saved (a stale version or a lease not held)', async () => {
      const run = await create();
      const claimed = await store.runs.claim('t1', run.runId, 'w1', 30_000);
      const fence = {
        tenantId: 't1',
        runId: run.runId,
        leaseEpoch: claimed!.leaseEpoch,
        checkpointVersion: 1,
      };
      for (const [f, owner] of [
        [{ ...fence, checkpointVersion: 7 }, 'w1'],
        [fence, 'someone-else'],
      ] as const) {
        const step = await store.reserveStep({
          save: {
            fence: f,
            checkpoint: response,
            storedMessages: 0,
            status: 'running',
            renewLease: { owner, leaseMs: 30_000 },
          },
          reservations: [reservation(run.runId, 'c1')],
          actor,
        });
        expect(step).toBeUndefined();
      }
      expect(await store.ledger.get('t1', `${run.runId}:c1`)).toBeUndefined();
      expect((await store.runs.get('t1', run.runId))?.checkpointVersion).toBe(1);
    });

    it('records every outcome and the checkpoint that tells them in one write', async () => {
      const { run, fence, step } = await reservedStep(3);
      const records = step!.reservations.map((r) => r.record);
      const recorded = await store.recordStep({
        transitions: records.map(completedBy),
        save: {
          fence,
          checkpoint: told,
          storedMessages: 1,
          status: 'running',
          events: [{ type: 'tool.settled', data: {} }],
        },
      });
      expect(recorded.version).toBe(3);
      expect(recorded.results.map((r) => [r.applied, r.record?.status, r.record?.result])).toEqual([
        [true, 'completed', { ok: 'c1' }],
        [true, 'completed', { ok: 'c2' }],
        [true, 'completed', { ok: 'c3' }],
      ]);
      expect((await store.runs.get('t1', run.runId))?.checkpoint).toEqual(told);
      const events = await store.runs.events('t1', run.runId, 0, 100);
      expect(events.map((e) => e.type)).toContain('tool.settled');
    });

    it('records the outcomes that apply but saves no checkpoint when one does not (the caller tells what happened)', async () => {
      const { run, fence, step } = await reservedStep(2);
      const [first, second] = step!.reservations.map((r) => r.record) as [
        ToolExecutionRecord,
        ToolExecutionRecord,
      ];
      // An operator settled the second call meanwhile.
      await store.ledger.transition({
        ...completedBy(second),
        to: 'failed',
        via: 'resolve',
        actor: { kind: 'operator', id: 'ops' },
        reason: 'no',
        recordIgnored: false,
      });
      const recorded = await store.recordStep({
        transitions: [completedBy(first), completedBy(second)],
        save: { fence, checkpoint: told, storedMessages: 1, status: 'running' },
      });
      expect(recorded.version).toBeNull();
      expect(recorded.results[0]).toMatchObject({ applied: true, record: { status: 'completed' } });
      expect(recorded.results[1]).toMatchObject({
        applied: false,
        conflict: true,
        record: { status: 'failed' },
      });
      const now = await store.runs.get('t1', run.runId);
      expect(now?.checkpointVersion).toBe(2);
      expect(now?.checkpoint).toEqual(response);
    });

    it('records the outcomes even when the checkpoint is fenced out: they are the truth', async () => {
      const { run, fence, step } = await reservedStep(1);
      const record = step!.reservations[0]!.record;
      const recorded = await store.recordStep({
        transitions: [completedBy(record)],
        save: {
          fence: { ...fence, leaseEpoch: fence.leaseEpoch + 1 },
          checkpoint: told,
          storedMessages: 1,
          status: 'running',
        },
      });
      expect(recorded.version).toBeUndefined();
      expect(recorded.results[0]).toMatchObject({ applied: true, record: { status: 'completed' } });
      expect((await store.ledger.get('t1', record.idempotencyKey))?.status).toBe('completed');
      expect((await store.runs.get('t1', run.runId))?.checkpointVersion).toBe(2);
    });

    it('saves the checkpoint alone when the step has no outcome to record', async () => {
      const { fence } = await reservedStep(1);
      const recorded = await store.recordStep({
        transitions: [],
        save: { fence, checkpoint: told, storedMessages: 1, status: 'running' },
      });
      expect(recorded).toEqual({ results: [], version: 3 });
    });
  });
});
