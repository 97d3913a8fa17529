import { createHash, randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { argsDigest, isUnknownCall, type Actor, type ToolExecutionRecord } from '../../src/ledger/index.js';
import { unknownCallCursor } from '../../src/calls/index.js';
import type { ApiKeyRole, NewApiKey, Store } from '../../src/store/index.js';
import type { ConformanceDatabase, OpenedStore, RawConnection } from './conformance.js';

const RUNTIME: Actor = { kind: 'runtime', id: 'conformance' };
const EMPTY = { messages: [], step: 0, pending: null };

async function withRaw<T>(db: ConformanceDatabase, fn: (raw: RawConnection) => Promise<T>): Promise<T> {
  const raw = await db.connect();
  try {
    return await fn(raw);
  } finally {
    await raw.close();
  }
}

/**
 * What every store must do for the operator API: API keys (stored by hash, scoped to a tenant,
 * revoked once) and the monitor's views (unknown calls joined with run leases, counts for metrics).
 * Each group opens its own database, so counts are exact.
 */
export function describeOperatorConformance(name: string, open: () => Promise<OpenedStore>): void {
  describe(`operator store conformance: ${name}`, () => {
    let opened: OpenedStore;
    let store: Store;
    let seq = 0;

    beforeAll(async () => {
      opened = await open();
      store = opened.store;
    });
    afterAll(async () => {
      await opened.cleanup();
    });

    function newKey(tenantId: string, role: ApiKeyRole = 'operator'): NewApiKey & { secret: string } {
      const secret = randomBytes(16).toString('hex');
      return {
        keyId: `key_${++seq}_${randomBytes(3).toString('hex')}`,
        keyHash: createHash('sha256').update(secret).digest('hex'),
        tenantId,
        actorId: `ops-${seq}`,
        role,
        createdBy: null,
        secret,
      };
    }

    describe('api keys', () => {
      it('stores a key by its hash, finds it by hash, and never returns the hash', async () => {
        const key = newKey('acme', 'viewer');
        const created = await store.apiKeys.create(key);
        expect(created).toMatchObject({
          keyId: key.keyId,
          tenantId: 'acme',
          actorId: key.actorId,
          role: 'viewer',
          createdBy: null,
          revokedAt: null,
          revokedBy: null,
        });
        expect(Object.keys(created)).not.toContain('keyHash');
        expect(await store.apiKeys.findByHash(key.keyHash)).toEqual(created);
        expect(await store.apiKeys.findByHash(createHash('sha256').update('nope').digest('hex'))).toBe(
          undefined,
        );
        expect(await store.apiKeys.get('acme', key.keyId)).toEqual(created);
        expect(await store.apiKeys.get('globex', key.keyId)).toBe(undefined);
        const stored = await withRaw(opened, (raw) =>
          raw.query(`SELECT key_hash FROM api_keys WHERE key_id = '${key.keyId}'`),
        );
        expect(stored).toEqual([{ key_hash: key.keyHash }]);
      });

      it('refuses a second key with the same hash', async () => {
        const key = newKey('acme');
        await store.apiKeys.create(key);
        await expect(store.apiKeys.create({ ...key, keyId: `${key.keyId}_b` })).rejects.toThrow();
        expect(await store.apiKeys.get('acme', `${key.keyId}_b`)).toBe(undefined);
      });

      it("lists a tenant's keys in creation order, page by page, and no other tenant's", async () => {
        const tenant = `t_list_${name}`;
        const made = [];
        for (let i = 0; i < 5; i++) made.push(await store.apiKeys.create(newKey(tenant)));
        await store.apiKeys.create(newKey(`${tenant}_other`));
        const first = await store.apiKeys.list(tenant, { limit: 2 });
        const last = first.at(-1)!;
        const second = await store.apiKeys.list(tenant, {
          limit: 10,
          after: { at: last.createdAt, keyId: last.keyId },
        });
        const expected = [...made].sort((a, b) =>
          a.createdAt === b.createdAt
            ? a.keyId.localeCompare(b.keyId)
            : a.createdAt.localeCompare(b.createdAt),
        );
        expect([...first, ...second].map((k) => k.keyId)).toEqual(expected.map((k) => k.keyId));
      });

      it('revokes a live key once, in its own tenant only; a revoked key no longer authenticates', async () => {
        const key = newKey('acme', 'admin');
        await store.apiKeys.create(key);
        expect(await store.apiKeys.revoke('globex', key.keyId, 'intruder')).toBe(undefined);
        expect(await store.apiKeys.findByHash(key.keyHash)).toBeDefined();
        const results = await Promise.all(
          Array.from({ length: 10 }, (_, i) => store.apiKeys.revoke('acme', key.keyId, `admin-${i}`)),
        );
        const revoked = results.filter((r) => r !== undefined);
        expect(revoked).toHaveLength(1);
        expect(revoked[0]?.revokedAt).not.toBeNull();
        expect(await store.apiKeys.findByHash(key.keyHash)).toBe(undefined);
        expect(await store.apiKeys.get('acme', key.keyId)).toEqual(revoked[0]);
      });

      it('never deletes a key', async () => {
        const key = newKey('acme');
        await store.apiKeys.create(key);
        await withRaw(opened, async (raw) => {
          await expect(raw.query(`DELETE FROM api_keys WHERE key_id = '${key.keyId}'`)).rejects.toThrow(
            /never deleted|append-only/,
          );
        });
        expect(await store.apiKeys.get('acme', key.keyId)).toBeDefined();
      });
    });

    describe('monitor', () => {
      async function call(
        tenantId: string,
        status: 'started' | 'indeterminate' | 'completed',
        options: { runId?: string; toolName?: string; timeoutMs?: number } = {},
      ): Promise<ToolExecutionRecord> {
        const runId = options.runId ?? `run_m${++seq}`;
        const args = { n: seq };
        const [reserved] = await store.ledger.reserve(
          [
            {
              tenantId,
              idempotencyKey: `${runId}:call_${seq}`,
              runId,
              toolCallId: `call_${seq}`,
              toolName: options.toolName ?? 'issue_credit',
              effect: 'external',
              args,
              argsDigest: argsDigest(args),
              compensationOf: null,
              // An attempt over at once unless asked otherwise: unknown as soon as nobody records it.
              attemptTimeoutMs: options.timeoutMs ?? 0,
            },
          ],
          RUNTIME,
        );
        let record = reserved!.record;
        if (status !== 'started') {
          const moved = await store.ledger.transition({
            tenantId,
            idempotencyKey: record.idempotencyKey,
            via: 'outcome',
            to: status,
            expect: { status: 'started', version: record.version },
            actor: RUNTIME,
            reason: null,
            recordIgnored: false,
          });
          record = moved.record!;
        }
        await sleep(3); // distinct attempt times, so the order is by time, not by key
        return record;
      }

      async function runWithLease(tenantId: string, leaseMs: number | null): Promise<string> {
        const runId = `run_l${++seq}`;
        await store.runs.create({ tenantId, runId, agent: 'a', input: 'x', checkpoint: EMPTY });
        if (leaseMs !== null)
          expect(await store.runs.claim(tenantId, runId, 'worker-1', leaseMs)).toBeDefined();
        return runId;
      }

      it('lists indeterminate calls, and started calls no live lease holds, longest waiting first', async () => {
        const t = `t_unknown_${name}`;
        const noRun = await call(t, 'started');
        const indeterminateLive = await call(t, 'indeterminate', { runId: await runWithLease(t, 60_000) });
        const startedLive = await call(t, 'started', { runId: await runWithLease(t, 60_000) });
        const startedQueued = await call(t, 'started', { runId: await runWithLease(t, null) });
        const expiredRun = await runWithLease(t, 1);
        const startedExpired = await call(t, 'started', { runId: expiredRun });
        await call(t, 'completed');
        await call(`${t}_other`, 'indeterminate');
        await sleep(5);
        const listed = await store.monitor.unknownCalls(t, { limit: 50, marginMs: 0 });
        expect(listed.map((r) => r.idempotencyKey)).toEqual(
          [noRun, indeterminateLive, startedQueued, startedExpired].map((r) => r.idempotencyKey),
        );
        expect(listed.map((r) => r.idempotencyKey)).not.toContain(startedLive.idempotencyKey);
        expect(listed[0]).toEqual(await store.ledger.get(t, noRun.idempotencyKey));
      });

      it('leaves out the calls whose last attempt may still land, by its time or a live lease, as isUnknownCall does', async () => {
        const t = `t_flight_${name}`;
        const over = await call(t, 'started');
        const byTime = await call(t, 'started', { timeoutMs: 60_000 });
        const indeterminateByTime = await call(t, 'indeterminate', { timeoutMs: 60_000 });
        const leased = await runWithLease(t, 60_000);
        const byLease = await call(t, 'started', { runId: leased });
        await sleep(5);
        const listed = await store.monitor.unknownCalls(t, { limit: 50, marginMs: 0 });
        expect(listed.map((r) => r.idempotencyKey)).toEqual([over.idempotencyKey]);
        // The library's definition says the same of each.
        const nowMs = Date.now();
        for (const record of [over, byTime, indeterminateByTime, byLease]) {
          const unknown = isUnknownCall({
            record,
            runLeaseLive: record.runId === leased,
            nowMs,
            marginMs: 0,
          });
          expect([record.idempotencyKey, unknown]).toEqual([
            record.idempotencyKey,
            listed.some((r) => r.idempotencyKey === record.idempotencyKey),
          ]);
        }
        // Within the landing margin even the attempt that is over may still land.
        expect(await store.monitor.unknownCalls(t, { limit: 50, marginMs: 60_000 })).toEqual([]);
        expect(
          (await store.monitor.stats({ marginMs: 60_000 })).unknown.find((u) => u.tenantId === t),
        ).toBeUndefined();
        expect(
          (await store.monitor.stats({ marginMs: 0 })).unknown.find((u) => u.tenantId === t)?.count,
        ).toBe(1);
      });

      it('filters by run and tool, and pages with a cursor without skipping or repeating', async () => {
        const t = `t_filter_${name}`;
        const made: ToolExecutionRecord[] = [];
        for (let i = 0; i < 5; i++)
          made.push(await call(t, 'indeterminate', { toolName: i % 2 ? 'b' : 'a' }));
        const byTool = await store.monitor.unknownCalls(t, { limit: 50, marginMs: 0, toolName: 'b' });
        expect(byTool.map((r) => r.idempotencyKey)).toEqual([made[1], made[3]].map((r) => r!.idempotencyKey));
        const byRun = await store.monitor.unknownCalls(t, { limit: 50, marginMs: 0, runId: made[2]!.runId });
        expect(byRun.map((r) => r.idempotencyKey)).toEqual([made[2]!.idempotencyKey]);
        const pages: string[] = [];
        let after: { at: string; key: string } | undefined;
        for (;;) {
          const page = await store.monitor.unknownCalls(t, {
            limit: 2,
            marginMs: 0,
            ...(after ? { after } : {}),
          });
          if (page.length === 0) break;
          pages.push(...page.map((r) => r.idempotencyKey));
          const last = page.at(-1)!;
          after = unknownCallCursor(last);
        }
        expect(pages).toEqual(made.map((r) => r.idempotencyKey));
      });

      it('counts calls by tool and status, runs by status, and unknown calls per tenant', async () => {
        const fresh = await open();
        try {
          const outer = store;
          store = fresh.store;
          const a1 = await call('acme', 'indeterminate', { toolName: 'credit' });
          await call('acme', 'started', { toolName: 'credit', runId: await runWithLease('acme', 60_000) });
          await call('acme', 'completed', { toolName: 'credit' });
          await call('acme', 'completed', { toolName: 'email' });
          const g1 = await call('globex', 'started', { toolName: 'email' });
          await call('globex', 'indeterminate', { toolName: 'email' });
          await runWithLease('globex', null);
          const stats = await store.monitor.stats({ marginMs: 0 });
          store = outer;
          const sortBy = <T>(rows: readonly T[], key: (r: T) => string): T[] =>
            [...rows].sort((x, y) => key(x).localeCompare(key(y)));
          expect(sortBy(stats.calls, (c) => `${c.toolName}/${c.status}`)).toEqual([
            { toolName: 'credit', status: 'completed', count: 1 },
            { toolName: 'credit', status: 'indeterminate', count: 1 },
            { toolName: 'credit', status: 'started', count: 1 },
            { toolName: 'email', status: 'completed', count: 1 },
            { toolName: 'email', status: 'indeterminate', count: 1 },
            { toolName: 'email', status: 'started', count: 1 },
          ]);
          expect(sortBy(stats.runs, (r) => r.status)).toEqual([
            { status: 'queued', count: 1 },
            { status: 'running', count: 1 },
          ]);
          expect(sortBy(stats.unknown, (u) => u.tenantId)).toEqual([
            { tenantId: 'acme', count: 1, oldestStartedAt: a1.attemptStartedAt },
            { tenantId: 'globex', count: 2, oldestStartedAt: g1.attemptStartedAt },
          ]);
        } finally {
          await fresh.cleanup();
        }
      });
    });
  });
}
