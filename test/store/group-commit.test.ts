import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { argsDigest, type ToolExecutionRecord } from '../../src/ledger/index.js';
import type { Checkpoint } from '../../src/run-state/index.js';
import { openStore, type ReserveRequest, type TransitionRequest } from '../../src/store/index.js';
import { groupCommitFromEnv, poolSizeFromEnv } from '../../src/store/open-store.js';
import type { PostgresStore } from '../../src/store/postgres/index.js';
import type { ReserveStepRequest } from '../../src/store/step-writes.js';
import { createTestDatabase } from '../support/databases.js';

/*
 * Group commit on a live PostgreSQL: the step writes of different runs sent as one statement decide
 * exactly what each would alone (fence, compare-and-set, a key two runs share), write one history
 * event per change, and a group the server refuses is sent again write by write.
 */

const TENANT = 'gc';
const actor = { kind: 'runtime', id: 'w1' } as const;
const response: Checkpoint = { messages: [{ role: 'user', content: 'go' }], step: 1, pending: { calls: [] } };
const told: Checkpoint = {
  messages: [...response.messages, { role: 'tool', content: 'told' }],
  step: 1,
  pending: null,
};

const reservation = (runId: string, call: string, key = `${runId}:${call}`): ReserveRequest => ({
  tenantId: TENANT,
  idempotencyKey: key,
  runId,
  toolCallId: call,
  toolName: 'issue_credit',
  effect: 'external',
  args: { n: call },
  argsDigest: argsDigest({ n: call }),
  compensationOf: null,
  attemptTimeoutMs: 30_000,
});

const completedBy = (record: ToolExecutionRecord): TransitionRequest => ({
  tenantId: TENANT,
  idempotencyKey: record.idempotencyKey,
  via: 'outcome',
  to: 'completed',
  expect: { status: record.status, version: record.version },
  actor,
  reason: null,
  result: { ok: record.toolCallId },
  recordIgnored: true,
});

describe('group commit of step writes on PostgreSQL', () => {
  let db: { url: string; drop(): Promise<void> };
  let store: PostgresStore;
  let admin: pg.Client;
  let seq = 0;

  beforeAll(async () => {
    db = await createTestDatabase('group_commit');
    // One statement in flight: every write that arrives meanwhile waits for the next group.
    store = (await openStore(db.url, {
      migrate: true,
      groupCommit: { maxGroup: 16, maxInFlight: 1 },
    })) as PostgresStore;
    admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
  });

  afterAll(async () => {
    await admin.end();
    await store.close();
    await db.drop();
  });

  /** Claimed runs, each with its fence at version 1. */
  async function claimed(n: number) {
    return Promise.all(
      Array.from({ length: n }, async () => {
        const runId = `gc_${++seq}`;
        await store.runs.create({
          tenantId: TENANT,
          runId,
          agent: 'a',
          input: 'go',
          checkpoint: { messages: [], step: 0, pending: null },
        });
        const run = await store.runs.claim(TENANT, runId, 'w1', 30_000);
        return {
          runId,
          fence: { tenantId: TENANT, runId, leaseEpoch: run!.leaseEpoch, checkpointVersion: 1 },
        };
      }),
    );
  }

  const reserveStep = (
    fence: { tenantId: string; runId: string; leaseEpoch: number; checkpointVersion: number },
    reservations: ReserveRequest[],
  ): ReserveStepRequest => ({
    save: {
      fence,
      checkpoint: response,
      storedMessages: 0,
      status: 'running',
      events: [{ type: 'model.response', data: { step: 1 } }],
      renewLease: { owner: 'w1', leaseMs: 30_000 },
    },
    reservations,
    actor,
  });

  const events = async (key: string) =>
    (
      await admin.query<{ via: string; to_status: string }>(
        `SELECT via, to_status FROM tool_execution_events WHERE tenant_id = $1 AND idempotency_key = $2 ORDER BY id`,
        [TENANT, key],
      )
    ).rows.map((r) => `${r.via}>${r.to_status}`);

  it('reserves the steps of many runs in shared statements, each fenced and answered as alone', async () => {
    const runs = await claimed(12);
    const before = store.groupCommitStats()!.reserve;
    const shared = `shared_${seq}`;
    const results = await Promise.all(
      runs.map(({ runId, fence }, i) => {
        // Run 3 is fenced out (a stale version), run 5's lease is not this owner's; runs 7 and 8
        // both reserve one key a user gave them both.
        if (i === 3)
          return store.reserveStep(
            reserveStep({ ...fence, checkpointVersion: 9 }, [reservation(runId, 'c1')]),
          );
        if (i === 5) {
          const request = reserveStep(fence, [reservation(runId, 'c1')]);
          return store.reserveStep({
            ...request,
            save: { ...request.save, renewLease: { owner: 'w2', leaseMs: 30_000 } },
          });
        }
        const calls = [reservation(runId, 'c1'), reservation(runId, 'c2')];
        if (i === 7 || i === 8) calls.push(reservation(runId, 'c3', shared));
        return store.reserveStep(reserveStep(fence, calls));
      }),
    );
    const after = store.groupCommitStats()!.reserve;
    // Twelve writes in fewer statements: the first alone, the rest grouped.
    expect(after.writes - before.writes).toBe(12);
    expect(after.statements - before.statements).toBeLessThan(6);
    expect(after.refused - before.refused).toBe(0);

    for (const [i, result] of results.entries()) {
      const { runId } = runs[i]!;
      const stored = await store.runs.get(TENANT, runId);
      if (i === 3 || i === 5) {
        expect(result).toBeUndefined();
        expect(stored?.checkpointVersion).toBe(1);
        expect(await store.ledger.get(TENANT, `${runId}:c1`)).toBeUndefined();
        continue;
      }
      expect(result?.version).toBe(2);
      expect(stored?.checkpoint).toEqual(response);
      expect(result!.reservations.slice(0, 2).map((r) => [r.kind, r.record.status])).toEqual([
        ['reserved', 'started'],
        ['reserved', 'started'],
      ]);
      expect(await events(`${runId}:c1`)).toEqual(['reserve>started']);
    }
    // The key two runs share: one of them holds it, the other is answered with the record that stands.
    const sharedKinds = [results[7], results[8]].map((r) => r!.reservations[2]!.kind).sort();
    expect(sharedKinds).toEqual(['existing', 'reserved']);
    expect(await events(shared)).toEqual(['reserve>started']);
    const { rows } = await admin.query<{ n: string }>(
      'SELECT count(*) AS n FROM tool_executions WHERE tenant_id = $1 AND idempotency_key = $2',
      [TENANT, shared],
    );
    expect(Number(rows[0]!.n)).toBe(1);
  });

  it('records the outcomes of many runs in shared statements; a stale outcome and a fenced save stay their own', async () => {
    const runs = await claimed(9);
    const steps = await Promise.all(
      runs.map(({ runId, fence }) =>
        store.reserveStep(reserveStep(fence, [reservation(runId, 'c1'), reservation(runId, 'c2')])),
      ),
    );
    // An operator settles run 2's second call meanwhile.
    const settled = steps[2]!.reservations[1]!.record;
    await store.ledger.transition({
      ...completedBy(settled),
      to: 'failed',
      via: 'resolve',
      actor: { kind: 'operator', id: 'ops' },
      reason: 'no',
      recordIgnored: false,
    });
    const before = store.groupCommitStats()!.record;
    const recorded = await Promise.all(
      runs.map(({ fence }, i) =>
        store.recordStep({
          transitions: steps[i]!.reservations.map((r) => completedBy(r.record)),
          save: {
            // Run 4's save is fenced out (another epoch): its outcomes are the truth all the same.
            fence: { ...fence, checkpointVersion: 2, leaseEpoch: fence.leaseEpoch + (i === 4 ? 1 : 0) },
            checkpoint: told,
            storedMessages: 1,
            status: 'running',
            events: [{ type: 'tool.settled', data: {} }],
          },
        }),
      ),
    );
    const after = store.groupCommitStats()!.record;
    expect(after.writes - before.writes).toBe(9);
    expect(after.statements - before.statements).toBeLessThan(5);
    expect(after.refused - before.refused).toBe(0);
    for (const [i, result] of recorded.entries()) {
      const { runId } = runs[i]!;
      const stored = await store.runs.get(TENANT, runId);
      if (i === 2) {
        expect(result.version).toBeNull();
        expect(result.results.map((r) => [r.applied, r.record?.status])).toEqual([
          [true, 'completed'],
          [false, 'failed'],
        ]);
        expect(stored?.checkpointVersion).toBe(2);
        continue;
      }
      expect(result.results.map((r) => [r.applied, r.record?.status])).toEqual([
        [true, 'completed'],
        [true, 'completed'],
      ]);
      expect(await events(`${runId}:c1`)).toEqual(['reserve>started', 'outcome>completed']);
      if (i === 4) {
        expect(result.version).toBeUndefined();
        expect(stored?.checkpointVersion).toBe(2);
      } else {
        expect(result.version).toBe(3);
        expect(stored?.checkpoint).toEqual(told);
      }
    }
  });

  it('sends each write of a group the server refused again alone: only the bad one fails', async () => {
    const runs = await claimed(5);
    const before = store.groupCommitStats()!.reserve;
    const results = await Promise.allSettled(
      runs.map(({ runId, fence }, i) =>
        store.reserveStep(
          // Run 2's call has a timeout PostgreSQL cannot hold in an integer: the server refuses it.
          reserveStep(fence, [{ ...reservation(runId, 'c1'), attemptTimeoutMs: i === 2 ? 2 ** 40 : 30_000 }]),
        ),
      ),
    );
    const after = store.groupCommitStats()!.reserve;
    expect(after.refused - before.refused).toBeGreaterThanOrEqual(1);
    for (const [i, result] of results.entries()) {
      const { runId } = runs[i]!;
      if (i === 2) {
        expect(result.status).toBe('rejected');
        expect(String((result as PromiseRejectedResult).reason)).toMatch(/out of range/);
        expect(await store.ledger.get(TENANT, `${runId}:c1`)).toBeUndefined();
        expect((await store.runs.get(TENANT, runId))?.checkpointVersion).toBe(1);
        continue;
      }
      expect(result.status).toBe('fulfilled');
      expect(
        (result as PromiseFulfilledResult<Awaited<ReturnType<PostgresStore['reserveStep']>>>).value?.version,
      ).toBe(2);
      expect(await events(`${runId}:c1`)).toEqual(['reserve>started']);
    }
  });

  it('reads its bounds from ONCELY_PG_GROUP_COMMIT and refuses a value that is not one', () => {
    expect(groupCommitFromEnv({})).toBeUndefined();
    expect(groupCommitFromEnv({ ONCELY_PG_GROUP_COMMIT: ' ' })).toBeUndefined();
    expect(groupCommitFromEnv({ ONCELY_PG_GROUP_COMMIT: 'off' })).toBe(false);
    expect(groupCommitFromEnv({ ONCELY_PG_GROUP_COMMIT: '8x1' })).toEqual({ maxGroup: 8, maxInFlight: 1 });
    for (const bad of ['on', '0x2', '16', '128x2', '16x0', '16 x 2']) {
      expect(() => groupCommitFromEnv({ ONCELY_PG_GROUP_COMMIT: bad })).toThrow(
        /ONCELY_PG_GROUP_COMMIT=.*off, or <maxGroup>x<maxInFlight>/,
      );
    }
  });

  it('reads the pool size from ONCELY_PG_POOL_SIZE and refuses a value that is not one', () => {
    expect(poolSizeFromEnv({})).toBeUndefined();
    expect(poolSizeFromEnv({ ONCELY_PG_POOL_SIZE: '3' })).toBe(3);
    for (const bad of ['0', '-1', '2.5', 'ten', '1001']) {
      expect(() => poolSizeFromEnv({ ONCELY_PG_POOL_SIZE: bad })).toThrow(/ONCELY_PG_POOL_SIZE=.*1 to 1000/);
    }
  });
});
