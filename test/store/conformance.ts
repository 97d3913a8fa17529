import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isOncelyError } from '../../src/errors/index.js';
import {
  LEDGER_STATUSES,
  TRANSITION_VIAS,
  UNKNOWN_STATUSES,
  argsDigest,
  isAllowedTransition,
  settles,
  type Actor,
  type JsonValue,
  type LedgerEvent,
  type LedgerStatus,
  type ToolExecutionRecord,
  type TransitionVia,
} from '../../src/ledger/index.js';
import { latestVersion, loadMigrations } from '../../src/store/migrations.js';
import {
  openStore,
  type ListCursor,
  type ListFilter,
  type InlineRepeatScope,
  type ReserveRequest,
  type Store,
  type TransitionRequest,
  type WorkerBeat,
} from '../../src/store/index.js';
import { describeOperatorConformance } from './conformance-operator.js';

/** A connection straight to the database, around the store: better-sqlite3 on the file, pg on the URL. */
export interface RawConnection {
  query(sql: string): Promise<Record<string, unknown>[]>;
  close(): Promise<void>;
}

export interface ConformanceDatabase {
  /** What `openStore` takes for this database. */
  readonly url: string;
  connect(): Promise<RawConnection>;
  cleanup(): Promise<void>;
}

export interface OpenedStore extends ConformanceDatabase {
  /** A store open on the database, migrated. */
  readonly store: Store;
}

const RUNTIME: Actor = { kind: 'runtime', id: 'conformance' };
const OPERATOR: Actor = { kind: 'operator', id: 'ops-ana' };
const RECONCILER: Actor = { kind: 'reconcile', id: 'hook:issue_credit' };
const TENANT = 'acme';
const APPEND_ONLY = /append-only|never deleted/;

type Snapshot = { record: ToolExecutionRecord | undefined; history: LedgerEvent[] };
type Move = Omit<
  TransitionRequest,
  'tenantId' | 'idempotencyKey' | 'expect' | 'actor' | 'reason' | 'recordIgnored'
> &
  Partial<Pick<TransitionRequest, 'actor' | 'reason' | 'recordIgnored' | 'expect'>>;

/** How to bring a new record to each status, along edges of the transition table. */
const PATHS: Record<LedgerStatus, readonly Move[]> = {
  started: [],
  completed: [{ via: 'outcome', to: 'completed', result: { receipt: 'r1' }, resultReference: 'r1' }],
  failed: [{ via: 'outcome', to: 'failed', error: { code: 'TOOL_NOT_ATTEMPTED', message: 'token expired' } }],
  indeterminate: [
    { via: 'outcome', to: 'indeterminate', error: { code: 'TOOL_TIMEOUT', message: 'timed out' } },
  ],
  compensated: [
    { via: 'outcome', to: 'completed', result: { receipt: 'r1' }, resultReference: 'r1' },
    { via: 'compensate', to: 'compensated' },
  ],
};

async function codeOf(work: () => Promise<unknown>): Promise<string> {
  try {
    await work();
  } catch (error) {
    return isOncelyError(error) ? error.code : `not an OncelyError: ${String(error)}`;
  }
  return '(no error)';
}

async function withRaw<T>(db: ConformanceDatabase, fn: (raw: RawConnection) => Promise<T>): Promise<T> {
  const raw = await db.connect();
  try {
    return await fn(raw);
  } finally {
    await raw.close();
  }
}

async function migrationRows(db: ConformanceDatabase): Promise<{ version: number; n: number }[]> {
  const rows = await withRaw(db, (raw) =>
    raw.query('SELECT version, COUNT(*) AS n FROM schema_migrations GROUP BY version ORDER BY version'),
  );
  return rows.map((r) => ({ version: Number(r.version), n: Number(r.n) }));
}

/**
 * The behaviour every store must have, run against a real database of each dialect.
 *
 * @param open a fresh database with a migrated store open on it
 * @param createDatabase a fresh database with nothing in it (for the migration tests)
 */
export function describeStoreConformance(
  name: string,
  open: () => Promise<OpenedStore>,
  createDatabase: () => Promise<ConformanceDatabase>,
): void {
  describeOperatorConformance(name, open);
  describe(`store conformance: ${name}`, () => {
    let opened: OpenedStore;
    let store: Store;
    let seq = 0;
    const later: (() => Promise<void>)[] = [];

    beforeAll(async () => {
      opened = await open();
      store = opened.store;
    });
    afterEach(async () => {
      for (let job = later.pop(); job !== undefined; job = later.pop()) await job();
    });
    afterAll(async () => {
      await opened.cleanup();
    });

    function request(overrides: Partial<ReserveRequest> = {}): ReserveRequest {
      seq += 1;
      const runId = overrides.runId ?? `run_${seq}`;
      const toolCallId = overrides.toolCallId ?? 'call_1';
      const args: JsonValue = overrides.args ?? { accountId: 'acct_1', amountCents: 2500 };
      return {
        tenantId: TENANT,
        idempotencyKey: `${runId}:${toolCallId}`,
        runId,
        toolCallId,
        toolName: 'issue_credit',
        effect: 'external',
        argsDigest: argsDigest(args),
        compensationOf: null,
        attemptTimeoutMs: 30_000,
        ...overrides,
        args,
      };
    }

    async function reserveOne(req: ReserveRequest): Promise<ToolExecutionRecord> {
      const [result] = await store.ledger.reserve([req], RUNTIME);
      expect(result?.kind).toBe('reserved');
      return result!.record;
    }

    function transitionOf(record: ToolExecutionRecord, move: Move): TransitionRequest {
      return {
        tenantId: record.tenantId,
        idempotencyKey: record.idempotencyKey,
        expect: { status: record.status, version: record.version },
        actor: RUNTIME,
        reason: `to ${move.to}`,
        recordIgnored: false,
        ...move,
      };
    }

    async function apply(record: ToolExecutionRecord, move: Move): Promise<ToolExecutionRecord> {
      const result = await store.ledger.transition(transitionOf(record, move));
      expect(result.applied).toBe(true);
      return result.record!;
    }

    async function recordIn(
      status: LedgerStatus,
      overrides: Partial<ReserveRequest> = {},
    ): Promise<ToolExecutionRecord> {
      let record = await reserveOne(request(overrides));
      for (const move of PATHS[status]) record = await apply(record, move);
      expect(record.status).toBe(status);
      return record;
    }

    it('finds the earlier calls of a repeat digest in a run, a conversation or the tenant since a time, never one that did not take effect', async () => {
      const digest = `d_${seq}_${Date.now()}`;
      const runA = `run_rep_a_${seq}`;
      const completed = await recordIn('completed', { runId: runA, toolCallId: 'c1', repeatDigest: digest });
      // Not attempted: it did not take effect, so it is never an earlier call of a repeat.
      await recordIn('failed', { runId: runA, toolCallId: 'c2', repeatDigest: digest });
      const unknown = await recordIn('started', { repeatDigest: digest, conversationId: 'conv_r' });
      await recordIn('completed', { runId: runA, toolCallId: 'c3', repeatDigest: `${digest}_other` });
      const keys = (records: readonly ToolExecutionRecord[]) => records.map((r) => r.idempotencyKey).sort();

      expect(completed.repeatDigest).toBe(digest);
      expect(unknown.conversationId).toBe('conv_r');
      expect(keys(await store.ledger.repeatsOf(TENANT, [digest], { kind: 'run', runId: runA }))).toEqual([
        completed.idempotencyKey,
      ]);
      expect(
        keys(
          await store.ledger.repeatsOf(TENANT, [digest], { kind: 'conversation', conversationId: 'conv_r' }),
        ),
      ).toEqual([unknown.idempotencyKey]);
      expect(
        keys(
          await store.ledger.repeatsOf(TENANT, [digest], { kind: 'tenant', sinceMs: Date.now() - 60_000 }),
        ),
      ).toEqual(keys([completed, unknown]));
      expect(
        await store.ledger.repeatsOf(TENANT, [digest], { kind: 'tenant', sinceMs: Date.now() + 60_000 }),
      ).toEqual([]);
      expect(await store.ledger.repeatsOf('other-tenant', [digest], { kind: 'tenant', sinceMs: 0 })).toEqual(
        [],
      );
    });

    it('reserveUnlessRepeat reserves a new call only where no earlier call of its scope took effect or may have', async () => {
      const digest = `u_${seq}_${Date.now()}`;
      const runA = `run_unless_a_${seq}`;
      const scope = { kind: 'run', runId: runA } as const;
      const kinds = async (req: ReserveRequest, inScope: InlineRepeatScope = scope) =>
        (await store.ledger.reserveUnlessRepeat(req, inScope, RUNTIME)).kind;

      // Nothing earlier, or only a call that did not take effect: reserved, with its history event.
      await recordIn('failed', { runId: runA, toolCallId: 'c0', repeatDigest: digest });
      const first = request({ runId: runA, toolCallId: 'c1', repeatDigest: digest });
      expect(await kinds(first)).toBe('reserved');
      expect((await snapshot(first.idempotencyKey)).history.map((e) => e.via)).toEqual(['reserve']);
      // Its own record is no earlier call of itself: a replay is answered with the record.
      expect(await kinds(first)).toBe('existing');
      // A second call with the digest: the first may have taken effect (started), so nothing is written.
      const second = request({ runId: runA, toolCallId: 'c2', repeatDigest: digest });
      expect(await kinds(second)).toBe('repeated');
      expect(await snapshot(second.idempotencyKey)).toEqual({ record: undefined, history: [] });
      // Other digests, and other runs, are no repeats of it.
      expect(await kinds(request({ runId: runA, toolCallId: 'c3', repeatDigest: `${digest}_x` }))).toBe(
        'reserved',
      );
      expect(
        await kinds(request({ runId: `${runA}_b`, toolCallId: 'c1', repeatDigest: digest }), {
          kind: 'run',
          runId: `${runA}_b`,
        }),
      ).toBe('reserved');
      // A key that has a record is answered with it, whatever the scope holds.
      const standing = await recordIn('completed', { runId: runA, toolCallId: 'c4', repeatDigest: digest });
      const [again] = await Promise.all([
        kinds({ ...second, idempotencyKey: standing.idempotencyKey, toolCallId: 'c4' }),
      ]);
      expect(again).toBe('existing');
      // A conversation's scope.
      const conversation = { kind: 'conversation', conversationId: `conv_u_${seq}` } as const;
      const inConversation = (toolCallId: string) =>
        request({ toolCallId, repeatDigest: digest, conversationId: conversation.conversationId });
      expect(await kinds(inConversation('k1'), conversation)).toBe('reserved');
      expect(await kinds(inConversation('k2'), conversation)).toBe('repeated');
      // It takes only a new call with a repeat digest.
      await expect(
        store.ledger.reserveUnlessRepeat(request({ repeatDigest: null }), scope, RUNTIME),
      ).rejects.toThrow(/needs a new call with a repeat digest/);
    });

    it('guardRepeats holds a second transaction on the same digest until the first ends', async () => {
      const digest = `g_${seq}_${Date.now()}`;
      let release!: () => void;
      const held = new Promise<void>((resolve) => (release = resolve));
      let firstIn!: () => void;
      const inFirst = new Promise<void>((resolve) => (firstIn = resolve));
      const order: string[] = [];
      const first = store.transaction(async (tx) => {
        await tx.ledger.guardRepeats(TENANT, [digest]);
        order.push('first in');
        firstIn();
        await held;
        order.push('first out');
      });
      await inFirst;
      const second = store.transaction(async (tx) => {
        await tx.ledger.guardRepeats(TENANT, [digest]);
        order.push('second in');
      });
      await sleep(100);
      expect(order).toEqual(['first in']);
      release();
      await Promise.all([first, second]);
      expect(order).toEqual(['first in', 'first out', 'second in']);
    });

    async function snapshot(key: string, tenantId = TENANT): Promise<Snapshot> {
      return {
        record: await store.ledger.get(tenantId, key),
        history: await store.ledger.history(tenantId, key),
      };
    }

    async function freshDatabase(): Promise<ConformanceDatabase> {
      const db = await createDatabase();
      later.push(() => db.cleanup());
      return db;
    }

    async function openOn(db: ConformanceDatabase): Promise<Store> {
      const s = await openStore(db.url, { migrate: true });
      later.push(() => s.close());
      return s;
    }

    describe('reserve', () => {
      it('stamps a new record once: created, updated and attempt started are one instant, in a batch of 2,000', async () => {
        // Each read of the clock by itself put a millisecond's edge between a record's stamps now and then.
        const batch = Array.from({ length: 2_000 }, (_, i) =>
          request({ idempotencyKey: `run_stamp:call_${i}`, runId: 'run_stamp', toolCallId: `call_${i}` }),
        );
        const results = await store.ledger.reserve(batch, RUNTIME);
        const apart = results.filter(
          (r) =>
            r.record.createdAt !== r.record.attemptStartedAt || r.record.createdAt !== r.record.updatedAt,
        );
        expect(results).toHaveLength(2_000);
        expect(apart.map((r) => r.record.idempotencyKey)).toEqual([]);
      });

      it('reserves a new key as started, attempt 1, version 1, with a reserve event', async () => {
        const req = request();
        const [result, ...rest] = await store.ledger.reserve([req], RUNTIME);
        expect(rest).toEqual([]);
        expect(result?.kind).toBe('reserved');
        expect(result?.record).toMatchObject({
          tenantId: TENANT,
          idempotencyKey: req.idempotencyKey,
          runId: req.runId,
          toolCallId: req.toolCallId,
          toolName: 'issue_credit',
          effect: 'external',
          args: { accountId: 'acct_1', amountCents: 2500 },
          argsDigest: req.argsDigest,
          status: 'started',
          attempt: 1,
          version: 1,
          result: null,
          resultReference: null,
          error: null,
          compensationOf: null,
          attemptTimeoutMs: 30_000,
          settledAt: null,
          settledBy: null,
        });
        expect(result?.record.attemptStartedAt).toBe(result?.record.createdAt);
        const { record, history } = await snapshot(req.idempotencyKey);
        expect(record).toEqual(result?.record);
        expect(history).toHaveLength(1);
        expect(history[0]).toMatchObject({
          tenantId: TENANT,
          idempotencyKey: req.idempotencyKey,
          kind: 'transition',
          actor: RUNTIME,
          via: 'reserve',
          from: null,
          to: 'started',
          attempt: 1,
        });
      });

      it('keeps the arguments and the compensation link exactly as given', async () => {
        const args = { nested: { list: [1, 'two', null, true], empty: {} }, unicode: 'é😀' };
        const req = request({ args, compensationOf: 'run_x:call_1', effect: 'write' });
        const record = await reserveOne(req);
        expect(record.args).toEqual(args);
        expect(record.compensationOf).toBe('run_x:call_1');
        expect(record.effect).toBe('write');
        expect((await store.ledger.get(TENANT, req.idempotencyKey))?.args).toEqual(args);
      });

      for (const status of ['started', 'indeterminate', 'completed', 'compensated'] as const) {
        it(`answers an existing ${status} key with the record and writes nothing`, async () => {
          const record = await recordIn(status);
          const before = await snapshot(record.idempotencyKey);
          const again = request({ runId: record.runId });
          const [result] = await store.ledger.reserve([again], RUNTIME);
          expect(result).toEqual({ kind: 'existing', record: before.record });
          expect(await snapshot(record.idempotencyKey)).toEqual(before);
        });
      }

      it('never takes over a failed key by itself: it answers the record, and the caller decides', async () => {
        const failed = await recordIn('failed');
        const before = await snapshot(failed.idempotencyKey);
        const [result] = await store.ledger.reserve([request({ runId: failed.runId })], RUNTIME);
        expect(result).toEqual({ kind: 'existing', record: before.record });
        expect(await snapshot(failed.idempotencyKey)).toEqual(before);
      });

      it('does not re-open a failed key at a version it no longer has', async () => {
        const failed = await recordIn('failed');
        const before = await snapshot(failed.idempotencyKey);
        const stale = request({ runId: failed.runId, reopenVersion: failed.version - 1 });
        const [result] = await store.ledger.reserve([stale], RUNTIME);
        expect(result).toEqual({ kind: 'existing', record: before.record });
        expect(await snapshot(failed.idempotencyKey)).toEqual(before);
      });

      for (const status of ['started', 'indeterminate', 'completed', 'compensated'] as const) {
        it(`never re-opens a ${status} key, even at its version`, async () => {
          const record = await recordIn(status);
          const before = await snapshot(record.idempotencyKey);
          const [result] = await store.ledger.reserve(
            [request({ runId: record.runId, reopenVersion: record.version })],
            RUNTIME,
          );
          expect(result).toEqual({ kind: 'existing', record: before.record });
          expect(await snapshot(record.idempotencyKey)).toEqual(before);
        });
      }

      it('re-opens a failed key at the version it saw, same arguments: attempt 2, same key, error and result cleared', async () => {
        const failed = await recordIn('failed');
        expect(failed.error).toEqual({ code: 'TOOL_NOT_ATTEMPTED', message: 'token expired' });
        expect(failed.settledAt).not.toBeNull();
        const [result] = await store.ledger.reserve(
          [request({ runId: failed.runId, reopenVersion: failed.version, attemptTimeoutMs: 1234 })],
          RUNTIME,
        );
        expect(result?.kind).toBe('reserved');
        expect(result?.record.attemptTimeoutMs).toBe(1234);
        expect(result?.record).toMatchObject({
          idempotencyKey: failed.idempotencyKey,
          status: 'started',
          attempt: 2,
          version: failed.version + 1,
          error: null,
          result: null,
          resultReference: null,
          settledAt: null,
          settledBy: null,
          createdAt: failed.createdAt,
        });
        expect(result!.record.attemptStartedAt >= failed.attemptStartedAt).toBe(true);
        const history = await store.ledger.history(TENANT, failed.idempotencyKey);
        expect(history).toHaveLength(3);
        expect(history[2]).toMatchObject({
          kind: 'transition',
          via: 'reserve',
          from: 'failed',
          to: 'started',
          attempt: 2,
        });
      });

      it('does not re-reserve a failed key whose arguments differ', async () => {
        const failed = await recordIn('failed');
        const before = await snapshot(failed.idempotencyKey);
        const other = request({
          runId: failed.runId,
          args: { accountId: 'acct_1', amountCents: 9999 },
          reopenVersion: failed.version,
        });
        const [result] = await store.ledger.reserve([other], RUNTIME);
        expect(result).toEqual({ kind: 'existing', record: before.record });
        expect(await snapshot(failed.idempotencyKey)).toEqual(before);
      });

      it('does not re-reserve a failed key made by another tool', async () => {
        const failed = await recordIn('failed');
        const before = await snapshot(failed.idempotencyKey);
        const [result] = await store.ledger.reserve(
          [request({ runId: failed.runId, toolName: 'send_email', reopenVersion: failed.version })],
          RUNTIME,
        );
        expect(result).toEqual({ kind: 'existing', record: before.record });
        expect(await snapshot(failed.idempotencyKey)).toEqual(before);
      });

      it('reserves a batch of new and existing keys in one call, answering in request order', async () => {
        const done = await recordIn('completed');
        const failed = await recordIn('failed');
        const unknown = await recordIn('indeterminate');
        const fresh1 = request();
        const fresh2 = request();
        const batch = [
          fresh1,
          request({ runId: done.runId }),
          request({ runId: failed.runId, reopenVersion: failed.version }),
          fresh2,
          request({ runId: unknown.runId }),
        ];
        const before = await Promise.all([done, unknown].map((r) => snapshot(r.idempotencyKey)));
        const results = await store.ledger.reserve(batch, RUNTIME);
        expect(
          results.map((r) => [r.kind, r.record.idempotencyKey, r.record.status, r.record.attempt]),
        ).toEqual([
          ['reserved', fresh1.idempotencyKey, 'started', 1],
          ['existing', done.idempotencyKey, 'completed', 1],
          ['reserved', failed.idempotencyKey, 'started', 2],
          ['reserved', fresh2.idempotencyKey, 'started', 1],
          ['existing', unknown.idempotencyKey, 'indeterminate', 1],
        ]);
        expect(await Promise.all([done, unknown].map((r) => snapshot(r.idempotencyKey)))).toEqual(before);
        for (const key of [fresh1.idempotencyKey, fresh2.idempotencyKey]) {
          expect((await store.ledger.history(TENANT, key)).map((e) => e.via)).toEqual(['reserve']);
        }
      });

      it('reserves nothing for an empty batch', async () => {
        await expect(store.ledger.reserve([], RUNTIME)).resolves.toEqual([]);
      });
    });

    describe('transition: every (from, to, via) against the transition table', () => {
      for (const from of LEDGER_STATUSES) {
        for (const to of LEDGER_STATUSES) {
          for (const via of TRANSITION_VIAS) {
            // `reserve` edges are taken by reserve() alone, which also counts the attempt.
            const allowed = via !== 'reserve' && isAllowedTransition(from, to, via);
            const title = `${from} → ${to} by ${via}: ${allowed ? 'applies, compare-and-set' : 'refused, nothing written'}`;
            it(title, async () => {
              const record = await recordIn(from);
              const before = await snapshot(record.idempotencyKey);
              const move = {
                via: via as Exclude<TransitionVia, 'reserve'>,
                to,
                actor: OPERATOR,
                reason: 'matrix',
                ...(to === 'completed'
                  ? { result: { receipt: 'matrix' }, resultReference: 'matrix-ref' }
                  : {}),
                ...(to === 'failed' ? { error: { code: 'MATRIX', message: 'did not happen' } } : {}),
              } satisfies Move;
              if (!allowed) {
                const refused = await codeOf(() =>
                  store.ledger.transition(transitionOf(record, { ...move, recordIgnored: true })),
                );
                expect(refused).toBe('LEDGER_TRANSITION_REFUSED');
                expect(await snapshot(record.idempotencyKey)).toEqual(before);
                return;
              }
              const result = await store.ledger.transition(transitionOf(record, move));
              expect(result.applied).toBe(true);
              const moved = result.record!;
              expect(moved).toMatchObject({
                status: to,
                version: record.version + 1,
                attempt: record.attempt,
              });
              if (to === 'completed')
                expect(moved).toMatchObject({ result: { receipt: 'matrix' }, resultReference: 'matrix-ref' });
              if (to === 'failed') expect(moved.error).toEqual({ code: 'MATRIX', message: 'did not happen' });
              if (settles(to)) {
                expect(moved.settledAt).not.toBeNull();
                expect(moved.settledBy).toEqual(OPERATOR);
              } else {
                expect(moved.settledAt).toBeNull();
                expect(moved.settledBy).toBeNull();
              }
              const after = await snapshot(record.idempotencyKey);
              expect(after.record).toEqual(moved);
              expect(after.history.slice(0, -1)).toEqual(before.history);
              expect(after.history.at(-1)).toMatchObject({
                kind: 'transition',
                actor: OPERATOR,
                via,
                from,
                to,
                attempt: record.attempt,
                reason: 'matrix',
              });
              // The same request again holds a stale version now: it must not apply a second time.
              const replay = await store.ledger.transition(transitionOf(record, move));
              expect(replay).toEqual({ applied: false, record: moved });
              expect(await snapshot(record.idempotencyKey)).toEqual(after);
            });
          }
        }
      }
    });

    describe('transition: compare-and-set', () => {
      it('does not apply with a stale version, and records it as ignored when asked', async () => {
        const started = await reserveOne(request());
        const unknown = await apply(started, { via: 'outcome', to: 'indeterminate' });
        const stale: TransitionRequest = {
          ...transitionOf(unknown, { via: 'outcome', to: 'completed', result: { late: true } }),
          expect: { status: 'indeterminate', version: unknown.version - 1 },
          recordIgnored: true,
          reason: 'late',
        };
        const before = await snapshot(unknown.idempotencyKey);
        const result = await store.ledger.transition(stale);
        expect(result).toEqual({ applied: false, record: unknown });
        const after = await snapshot(unknown.idempotencyKey);
        expect(after.record).toEqual(unknown);
        expect(after.history.slice(0, -1)).toEqual(before.history);
        expect(after.history.at(-1)).toMatchObject({
          kind: 'ignored',
          via: 'outcome',
          from: 'indeterminate',
          to: 'completed',
          actor: RUNTIME,
          reason: 'late',
          attempt: 1,
        });
      });

      it('does not apply with a stale status, and appends nothing unless asked', async () => {
        const done = await recordIn('completed');
        const before = await snapshot(done.idempotencyKey);
        const stale: TransitionRequest = {
          ...transitionOf(done, { via: 'resolve', to: 'failed', actor: OPERATOR }),
          expect: { status: 'started', version: 1 },
        };
        expect(await store.ledger.transition(stale)).toEqual({ applied: false, record: done });
        expect(await snapshot(done.idempotencyKey)).toEqual(before);

        expect(await store.ledger.transition({ ...stale, recordIgnored: true })).toEqual({
          applied: false,
          record: done,
        });
        const after = await snapshot(done.idempotencyKey);
        expect(after.record).toEqual(done);
        expect(after.history).toHaveLength(before.history.length + 1);
        expect(after.history.at(-1)).toMatchObject({
          kind: 'ignored',
          via: 'resolve',
          from: 'completed',
          to: 'failed',
          actor: OPERATOR,
        });
      });

      it('files an effect that landed on a call settled failed as a loud conflict, marking the record', async () => {
        const started = await reserveOne(request());
        const unknown = await apply(started, { via: 'outcome', to: 'indeterminate' });
        const settled = await apply(unknown, { via: 'resolve', to: 'failed', actor: OPERATOR });
        const late: TransitionRequest = {
          ...transitionOf(unknown, { via: 'outcome', to: 'completed', result: { credit: 'cr_1' } }),
          recordIgnored: true,
          attempt: 1,
          reason: 'late outcome',
        };
        const result = await store.ledger.transition(late);
        expect(result.applied).toBe(false);
        expect(result).toMatchObject({
          conflict: true,
          record: { status: 'failed', version: settled.version },
        });
        expect(result.record?.conflictAt).not.toBeNull();
        const history = await store.ledger.history(TENANT, unknown.idempotencyKey);
        expect(history.at(-1)).toMatchObject({
          kind: 'conflict',
          via: 'outcome',
          from: 'failed',
          to: 'completed',
          attempt: 1,
          detail: { result: { credit: 'cr_1' } },
        });
        const listed = await store.ledger.list(TENANT, { conflict: true, limit: 50 });
        expect(listed.map((r) => r.idempotencyKey)).toContain(unknown.idempotencyKey);
        expect(listed.every((r) => r.conflictAt !== null)).toBe(true);
      });

      it('labels a lost outcome with the attempt that produced it, and calls an earlier attempt that landed after a re-open a conflict', async () => {
        const started = await reserveOne(request());
        const unknown = await apply(started, { via: 'outcome', to: 'indeterminate' });
        const failed = await apply(unknown, { via: 'reconcile', to: 'failed', actor: RECONCILER });
        const [again] = await store.ledger.reserve(
          [request({ runId: failed.runId, reopenVersion: failed.version })],
          RUNTIME,
        );
        expect(again).toMatchObject({ kind: 'reserved', record: { attempt: 2 } });
        const late = await store.ledger.transition({
          ...transitionOf(unknown, { via: 'outcome', to: 'completed', result: null }),
          recordIgnored: true,
          attempt: 1,
        });
        expect(late).toMatchObject({
          applied: false,
          conflict: true,
          record: { status: 'started', attempt: 2 },
        });
        expect((await store.ledger.history(TENANT, unknown.idempotencyKey)).at(-1)).toMatchObject({
          kind: 'conflict',
          from: 'started',
          attempt: 1,
        });
      });

      it('calls an attempt that ended unknown after its key was re-opened a conflict (unkeyed: it may have landed too), and not when keyed', async () => {
        for (const keyed of [false, true]) {
          const started = await reserveOne(request());
          // Attempt 1's process froze past its deadline; a hook found nothing, the key ran again.
          const failed = await apply(started, { via: 'reconcile', to: 'failed', actor: RECONCILER });
          const [again] = await store.ledger.reserve(
            [request({ runId: failed.runId, reopenVersion: failed.version })],
            RUNTIME,
          );
          await apply(again!.record, { via: 'outcome', to: 'completed' });
          // Thawed, attempt 1 ends not knowing whether its request landed.
          const late = await store.ledger.transition({
            ...transitionOf(started, {
              via: 'outcome',
              to: 'indeterminate',
              error: { code: 'RUN_LEASE_LOST', message: 'lost the lease' },
            }),
            recordIgnored: true,
            attempt: 1,
            keyed,
          });
          expect(late.applied).toBe(false);
          expect(late.record).toMatchObject({ status: 'completed', attempt: 2 });
          const last = (await store.ledger.history(TENANT, started.idempotencyKey)).at(-1);
          expect([keyed, last?.kind, last?.attempt, last?.to]).toEqual([
            keyed,
            keyed ? 'ignored' : 'conflict',
            1,
            'indeterminate',
          ]);
          const now = await store.ledger.get(TENANT, started.idempotencyKey);
          expect(now?.conflictAt === null).toBe(keyed);
        }
      });

      it('calls an attempt that ended unknown after a hook settled its call failed a conflict', async () => {
        const started = await reserveOne(request());
        await apply(started, { via: 'reconcile', to: 'failed', actor: RECONCILER });
        const late = await store.ledger.transition({
          ...transitionOf(started, { via: 'outcome', to: 'indeterminate' }),
          recordIgnored: true,
          attempt: 1,
          keyed: true,
        });
        expect(late).toMatchObject({ applied: false, conflict: true, record: { status: 'failed' } });
        expect(late.record?.conflictAt).not.toBeNull();
      });

      it('files an outcome that agrees with the settled record as ignored, not a conflict', async () => {
        const started = await reserveOne(request());
        const unknown = await apply(started, { via: 'outcome', to: 'indeterminate' });
        await apply(unknown, { via: 'resolve', to: 'completed', actor: OPERATOR });
        const result = await store.ledger.transition({
          ...transitionOf(unknown, { via: 'outcome', to: 'completed', result: null }),
          recordIgnored: true,
          attempt: 1,
        });
        expect(result).toMatchObject({ applied: false, record: { status: 'completed', conflictAt: null } });
        expect('conflict' in result).toBe(false);
        expect((await store.ledger.history(TENANT, unknown.idempotencyKey)).at(-1)?.kind).toBe('ignored');
      });

      it('answers a transition of a missing key with no record and writes nothing', async () => {
        const missing = request();
        const result = await store.ledger.transition({
          tenantId: TENANT,
          idempotencyKey: missing.idempotencyKey,
          via: 'outcome',
          to: 'completed',
          expect: { status: 'started', version: 1 },
          actor: RUNTIME,
          reason: null,
          recordIgnored: true,
        });
        expect(result).toEqual({ applied: false, record: undefined });
        expect(await snapshot(missing.idempotencyKey)).toEqual({ record: undefined, history: [] });
      });

      it('sets settledAt and settledBy when a transition settles, and only then', async () => {
        const started = await reserveOne(request());
        const unknown = await apply(started, { via: 'outcome', to: 'indeterminate' });
        expect(unknown.settledAt).toBeNull();
        expect(unknown.settledBy).toBeNull();
        const resolved = await apply(unknown, { via: 'resolve', to: 'completed', actor: OPERATOR });
        expect(resolved.settledAt).not.toBeNull();
        expect(Number.isNaN(Date.parse(resolved.settledAt!))).toBe(false);
        expect(resolved.settledBy).toEqual(OPERATOR);
        const compensated = await apply(resolved, {
          via: 'compensate',
          to: 'compensated',
          actor: { kind: 'operator', id: 'ops-bo' },
        });
        expect(compensated.settledBy).toEqual({ kind: 'operator', id: 'ops-bo' });
      });

      it('keeps the result of a completed call when it is compensated', async () => {
        const done = await recordIn('completed');
        const compensated = await apply(done, { via: 'compensate', to: 'compensated' });
        expect(compensated).toMatchObject({ result: { receipt: 'r1' }, resultReference: 'r1' });
      });
    });

    describe('transitions: the outcomes of a step in one write', () => {
      it('moves every record of a batch as transition would, answering in request order, one event each', async () => {
        const records = await Promise.all([1, 2, 3, 4].map(() => reserveOne(request())));
        const moves: Move[] = [
          { via: 'outcome', to: 'completed', result: { receipt: 'r_a' }, resultReference: 'ref_a' },
          { via: 'outcome', to: 'indeterminate', error: { code: 'TOOL_TIMEOUT', message: 'no answer' } },
          { via: 'outcome', to: 'failed', error: { code: 'NOT_ATTEMPTED', message: 'refused' } },
          { via: 'outcome', to: 'completed', result: { receipt: 'r_d' } },
        ];
        const before = await Promise.all(records.map((r) => snapshot(r.idempotencyKey)));
        const results = await store.ledger.transitions(records.map((r, i) => transitionOf(r, moves[i]!)));
        expect(results.map((r) => r.applied)).toEqual([true, true, true, true]);
        for (const [i, record] of records.entries()) {
          const move = moves[i]!;
          const moved = results[i]!.record!;
          expect(moved).toMatchObject({
            idempotencyKey: record.idempotencyKey,
            status: move.to,
            version: record.version + 1,
            attempt: 1,
          });
          if (move.to === 'completed') {
            expect(moved.result).toEqual(move.result);
            expect(moved.resultReference).toBe(move.resultReference ?? null);
            expect(moved.settledBy).toEqual(RUNTIME);
          } else {
            expect(moved.error).toEqual(move.error);
          }
          if (move.to === 'indeterminate') expect(moved.settledAt).toBeNull();
          const after = await snapshot(record.idempotencyKey);
          expect(after.record).toEqual(moved);
          expect(after.history.slice(0, -1)).toEqual(before[i]!.history);
          expect(after.history.at(-1)).toMatchObject({
            kind: 'transition',
            via: 'outcome',
            from: 'started',
            to: move.to,
            actor: RUNTIME,
            attempt: 1,
            reason: `to ${move.to}`,
          });
        }
      });

      it('moves the winners of a batch and answers each loser as transition would: ignored, conflict, missing', async () => {
        const winner = await reserveOne(request());
        const unknown = await apply(await reserveOne(request()), { via: 'outcome', to: 'indeterminate' });
        const settled = await apply(unknown, { via: 'resolve', to: 'failed', actor: OPERATOR });
        const completed = await recordIn('completed');
        const results = await store.ledger.transitions([
          transitionOf(winner, { via: 'outcome', to: 'completed', result: { receipt: 'won' } }),
          // A late effect on a call an operator settled failed: a conflict.
          {
            ...transitionOf(unknown, { via: 'outcome', to: 'completed', result: { credit: 'cr_9' } }),
            recordIgnored: true,
            attempt: 1,
          },
          // A stale outcome that agrees with the record: ignored.
          {
            ...transitionOf(completed, { via: 'outcome', to: 'completed', result: { receipt: 'r1' } }),
            expect: { status: 'started', version: 1 },
            recordIgnored: true,
          },
          // No such record.
          { ...transitionOf(winner, { via: 'outcome', to: 'failed' }), idempotencyKey: 'run_none:call_1' },
        ]);
        expect(results[0]).toMatchObject({
          applied: true,
          record: { status: 'completed', result: { receipt: 'won' } },
        });
        expect(results[1]).toMatchObject({
          applied: false,
          conflict: true,
          record: { status: 'failed', version: settled.version },
        });
        expect(results[2]).toEqual({ applied: false, record: completed });
        expect(results[3]).toEqual({ applied: false, record: undefined });
        expect((await store.ledger.history(TENANT, unknown.idempotencyKey)).at(-1)).toMatchObject({
          kind: 'conflict',
          from: 'failed',
          to: 'completed',
        });
        expect((await store.ledger.history(TENANT, completed.idempotencyKey)).at(-1)).toMatchObject({
          kind: 'ignored',
          from: 'completed',
          to: 'completed',
        });
        expect(await store.ledger.get(TENANT, 'run_none:call_1')).toBeUndefined();
      });

      it('refuses a batch with a move the table forbids, or a key named twice, writing nothing', async () => {
        const a = await reserveOne(request());
        const b = await reserveOne(request());
        const before = [await snapshot(a.idempotencyKey), await snapshot(b.idempotencyKey)];
        const ok = transitionOf(a, { via: 'outcome', to: 'completed', result: { receipt: 'x' } });
        const forbidden = transitionOf(b, { via: 'outcome', to: 'compensated' });
        expect(await codeOf(() => store.ledger.transitions([ok, forbidden]))).toBe(
          'LEDGER_TRANSITION_REFUSED',
        );
        await expect(store.ledger.transitions([ok, ok])).rejects.toThrow(/names a key twice/);
        expect([await snapshot(a.idempotencyKey), await snapshot(b.idempotencyKey)]).toEqual(before);
      });

      it('answers an empty batch with nothing', async () => {
        expect(await store.ledger.transitions([])).toEqual([]);
      });
    });

    describe('note', () => {
      it('appends a note with the current status and changes nothing else', async () => {
        const unknown = await recordIn('indeterminate');
        const before = await snapshot(unknown.idempotencyKey);
        await store.ledger.note({
          tenantId: TENANT,
          idempotencyKey: unknown.idempotencyKey,
          actor: { kind: 'reconcile', id: 'hook:issue_credit' },
          reason: 'could not tell',
          detail: { checked: 'billing' },
        });
        const after = await snapshot(unknown.idempotencyKey);
        expect(after.record).toEqual(before.record);
        expect(after.history.slice(0, -1)).toEqual(before.history);
        expect(after.history.at(-1)).toMatchObject({
          kind: 'note',
          via: null,
          from: 'indeterminate',
          to: null,
          reason: 'could not tell',
          detail: { checked: 'billing' },
          actor: { kind: 'reconcile', id: 'hook:issue_credit' },
        });
      });
    });

    describe('tenants', () => {
      it('keeps the same key in two tenants as two records', async () => {
        const req = request();
        const other = {
          ...request({ runId: req.runId, args: { accountId: 'acct_2', amountCents: 1 } }),
          tenantId: 'globex',
        };
        const [a] = await store.ledger.reserve([req], RUNTIME);
        const [b] = await store.ledger.reserve([other], RUNTIME);
        expect(a?.kind).toBe('reserved');
        expect(b?.kind).toBe('reserved');
        await apply(a!.record, { via: 'outcome', to: 'completed' });
        expect(await store.ledger.get('globex', req.idempotencyKey)).toMatchObject({
          tenantId: 'globex',
          status: 'started',
          args: { accountId: 'acct_2', amountCents: 1 },
        });
        expect(await store.ledger.get(TENANT, req.idempotencyKey)).toMatchObject({
          tenantId: TENANT,
          status: 'completed',
        });
        expect((await store.ledger.history('globex', req.idempotencyKey)).map((e) => e.to)).toEqual([
          'started',
        ]);
      });

      it('reads the records of keys of several tenants at once, each of its own tenant, skipping missing ones', async () => {
        const req = request();
        const other = {
          ...request({ runId: req.runId, args: { accountId: 'acct_2', amountCents: 1 } }),
          tenantId: 'globex',
        };
        await store.ledger.reserve([req], RUNTIME);
        await store.ledger.reserve([other], RUNTIME);
        const found = await store.ledger.getMany([
          { tenantId: TENANT, idempotencyKey: req.idempotencyKey },
          { tenantId: 'globex', idempotencyKey: req.idempotencyKey },
          { tenantId: 'initech', idempotencyKey: req.idempotencyKey },
          { tenantId: TENANT, idempotencyKey: 'run_missing:call_1' },
        ]);
        expect(found.map((r) => [r.tenantId, r.idempotencyKey, r.args]).sort()).toEqual(
          [
            [TENANT, req.idempotencyKey, req.args],
            ['globex', req.idempotencyKey, other.args],
          ].sort(),
        );
        expect(await store.ledger.getMany([])).toEqual([]);
      });

      it("shows nothing of one tenant's records to another", async () => {
        const record = await recordIn('indeterminate');
        const stranger = `stranger_${seq}`;
        expect(await store.ledger.get(stranger, record.idempotencyKey)).toBeUndefined();
        expect(await store.ledger.history(stranger, record.idempotencyKey)).toEqual([]);
        expect(await store.ledger.list(stranger, { limit: 100 })).toEqual([]);
        expect(await store.ledger.list(stranger, { limit: 100, statuses: UNKNOWN_STATUSES })).toEqual([]);
        const moved = await store.ledger.transition({
          ...transitionOf(record, { via: 'resolve', to: 'failed' }),
          tenantId: stranger,
          recordIgnored: true,
        });
        expect(moved).toEqual({ applied: false, record: undefined });
        expect(await store.ledger.get(TENANT, record.idempotencyKey)).toEqual(record);
      });
    });

    describe('list', () => {
      const byPosition = (a: ToolExecutionRecord, b: ToolExecutionRecord): number =>
        a.attemptStartedAt < b.attemptStartedAt
          ? -1
          : a.attemptStartedAt > b.attemptStartedAt
            ? 1
            : a.idempotencyKey < b.idempotencyKey
              ? -1
              : a.idempotencyKey > b.idempotencyKey
                ? 1
                : 0;

      /** 25 records in one tenant, reserved in 5 batches whose keys run backwards, then some settled. */
      async function populate(tenantId: string): Promise<Map<string, LedgerStatus>> {
        const statuses = new Map<string, LedgerStatus>();
        for (let batch = 0; batch < 5; batch++) {
          const requests = Array.from({ length: 5 }, (_, i) => {
            const n = 24 - (batch * 5 + i);
            return {
              ...request({
                runId: `list_${String(n).padStart(2, '0')}`,
                toolName: n % 2 === 0 ? 'even' : 'odd',
              }),
              tenantId,
            };
          });
          const reserved = await store.ledger.reserve(requests, RUNTIME);
          for (const [i, r] of reserved.entries()) {
            const n = 24 - (batch * 5 + i);
            const status: LedgerStatus =
              n % 3 === 0 ? 'completed' : n % 5 === 0 ? 'failed' : n % 4 === 1 ? 'indeterminate' : 'started';
            if (status !== 'started') await apply(r.record, { via: 'outcome', to: status });
            statuses.set(r.record.idempotencyKey, status);
          }
          await sleep(3); // so batches differ in attemptStartedAt; order must follow time, not the key
        }
        return statuses;
      }

      async function pages(
        tenantId: string,
        filter: Omit<ListFilter, 'limit' | 'after'>,
      ): Promise<ToolExecutionRecord[][]> {
        const all: ToolExecutionRecord[][] = [];
        let after: ListCursor | undefined;
        for (let i = 0; i < 10; i++) {
          const page = await store.ledger.list(tenantId, {
            ...filter,
            limit: 7,
            ...(after === undefined ? {} : { after }),
          });
          all.push(page);
          const last = page.at(-1);
          if (page.length < 7 || last === undefined) break;
          after = { at: last.attemptStartedAt, key: last.idempotencyKey };
        }
        return all;
      }

      it('lists a tenant in (attemptStartedAt, key) order, and the unknown filter returns only started and indeterminate', async () => {
        const tenantId = `list_${seq}`;
        const statuses = await populate(tenantId);
        const all = await store.ledger.list(tenantId, { limit: 100 });
        expect(all).toHaveLength(25);
        expect(all.map((r) => r.idempotencyKey)).toEqual(
          [...all].sort(byPosition).map((r) => r.idempotencyKey),
        );
        // The first batch (keys 20-24) was reserved first, the last (00-04) last: time, not key, leads.
        expect(
          all
            .slice(0, 5)
            .map((r) => r.runId)
            .sort(),
        ).toEqual(['list_20', 'list_21', 'list_22', 'list_23', 'list_24']);
        expect(
          all
            .slice(-5)
            .map((r) => r.runId)
            .sort(),
        ).toEqual(['list_00', 'list_01', 'list_02', 'list_03', 'list_04']);

        const expected = all.filter((r) =>
          ['started', 'indeterminate'].includes(statuses.get(r.idempotencyKey)!),
        );
        expect(expected.length).toBeGreaterThan(5);
        for (const filter of [UNKNOWN_STATUSES, ['indeterminate', 'started'] as const]) {
          const unknown = await store.ledger.list(tenantId, { limit: 100, statuses: filter });
          expect(unknown.map((r) => r.idempotencyKey)).toEqual(expected.map((r) => r.idempotencyKey));
          expect(new Set(unknown.map((r) => r.status))).toEqual(new Set(['started', 'indeterminate']));
        }
        const completed = await store.ledger.list(tenantId, { limit: 100, statuses: ['completed'] });
        expect(completed.map((r) => r.idempotencyKey)).toEqual(
          all.filter((r) => statuses.get(r.idempotencyKey) === 'completed').map((r) => r.idempotencyKey),
        );
        expect(await store.ledger.list(tenantId, { limit: 100, statuses: [] })).toEqual([]);
        expect(
          (await store.ledger.list(tenantId, { limit: 100, toolName: 'even' })).map((r) => r.toolName),
        ).toEqual(Array(13).fill('even'));
        expect(
          (await store.ledger.list(tenantId, { limit: 100, runId: 'list_07' })).map((r) => r.idempotencyKey),
        ).toEqual(['list_07:call_1']);
        expect(await store.ledger.list(tenantId, { limit: 3 })).toEqual(all.slice(0, 3));
      });

      it('pages with a cursor without gaps or repeats', async () => {
        const tenantId = `page_${seq}`;
        await populate(tenantId);
        const all = await store.ledger.list(tenantId, { limit: 100 });
        const paged = await pages(tenantId, {});
        expect(paged.map((p) => p.length)).toEqual([7, 7, 7, 4]);
        expect(paged.flat().map((r) => r.idempotencyKey)).toEqual(all.map((r) => r.idempotencyKey));

        const unknown = await store.ledger.list(tenantId, { limit: 100, statuses: UNKNOWN_STATUSES });
        const unknownPages = await pages(tenantId, { statuses: UNKNOWN_STATUSES });
        const keys = unknownPages.flat().map((r) => r.idempotencyKey);
        expect(keys).toEqual(unknown.map((r) => r.idempotencyKey));
        expect(new Set(keys).size).toBe(keys.length);
        expect(unknownPages.slice(0, -1).every((p) => p.length === 7)).toBe(true);
      });
    });

    describe('append-only history', () => {
      it('refuses a raw UPDATE or DELETE of events and a DELETE of records or runs', async () => {
        const record = await recordIn('completed');
        const before = await snapshot(record.idempotencyKey);
        await opened.store.runs.create({
          tenantId: record.tenantId,
          runId: `run_kept_${record.idempotencyKey}`,
          agent: 'a',
          input: 'x',
          checkpoint: { messages: [], step: 0, pending: null },
        });
        await withRaw(opened, async (raw) => {
          await expect(raw.query(`UPDATE tool_execution_events SET reason = 'rewritten'`)).rejects.toThrow(
            APPEND_ONLY,
          );
          await expect(raw.query('DELETE FROM tool_execution_events')).rejects.toThrow(APPEND_ONLY);
          await expect(raw.query('DELETE FROM tool_executions')).rejects.toThrow(APPEND_ONLY);
          // Run events name their run without a foreign key: a run is never deleted either.
          await expect(raw.query('DELETE FROM runs')).rejects.toThrow(APPEND_ONLY);
          const [count] = await raw.query(
            `SELECT COUNT(*) AS n FROM tool_execution_events WHERE reason = 'rewritten'`,
          );
          expect(Number(count?.n)).toBe(0);
        });
        expect(await snapshot(record.idempotencyKey)).toEqual(before);
      });
    });

    describe('loop steps', () => {
      const step = (runId: string, n: number, text: string) => ({
        tenantId: TENANT,
        runId,
        step: n,
        promptDigest: `digest_${n}`,
        response: { content: [{ type: 'text', text }] },
        modelId: 'mock',
        usage: { inputTokens: { total: 3 } },
      });

      it('records a step once: of two stores recording it at once, one writes and both get what stands', async () => {
        const db = await freshDatabase();
        const [a, b] = await Promise.all([openOn(db), openOn(db)]);
        const results = await Promise.all([
          a.loopSteps.record(step('loop_1', 0, 'from a')),
          b.loopSteps.record(step('loop_1', 0, 'from b')),
        ]);
        expect(results.filter((r) => r.recorded)).toHaveLength(1);
        expect(results[0]?.step).toEqual(results[1]?.step);
        const again = await a.loopSteps.record(step('loop_1', 0, 'a third'));
        expect(again).toEqual({ recorded: false, step: results[0]?.step });
        expect(again.step.usage).toEqual({ inputTokens: { total: 3 } });
        expect(Number.isNaN(Date.parse(again.step.createdAt))).toBe(false);
      });

      it("lists a run's steps in order, another tenant's never", async () => {
        for (const n of [1, 0, 2]) await store.loopSteps.record(step('loop_2', n, `step ${n}`));
        await store.loopSteps.record({ ...step('loop_2', 0, 'other tenant'), tenantId: 'other' });
        const steps = await store.loopSteps.list(TENANT, 'loop_2');
        expect(steps.map((s) => [s.step, s.response])).toEqual([
          [0, { content: [{ type: 'text', text: 'step 0' }] }],
          [1, { content: [{ type: 'text', text: 'step 1' }] }],
          [2, { content: [{ type: 'text', text: 'step 2' }] }],
        ]);
        expect(await store.loopSteps.get(TENANT, 'loop_2', 3)).toBeUndefined();
        expect((await store.loopSteps.get('other', 'loop_2', 0))?.response).toEqual({
          content: [{ type: 'text', text: 'other tenant' }],
        });
      });

      it('refuses a raw UPDATE or DELETE of a recorded step', async () => {
        await store.loopSteps.record(step('loop_3', 0, 'kept'));
        await withRaw(opened, async (raw) => {
          await expect(raw.query(`UPDATE loop_steps SET model_id = 'rewritten'`)).rejects.toThrow(
            APPEND_ONLY,
          );
          await expect(raw.query('DELETE FROM loop_steps')).rejects.toThrow(APPEND_ONLY);
        });
        expect((await store.loopSteps.get(TENANT, 'loop_3', 0))?.modelId).toBe('mock');
      });
    });

    describe('workers', () => {
      const beat = (workerId: string, extra: Partial<WorkerBeat> = {}): WorkerBeat => ({
        workerId,
        kind: 'worker',
        host: 'host-a',
        pid: 4242,
        concurrency: 4,
        version: '0.1.0',
        stopping: false,
        ...extra,
      });
      const LIVE = { liveMs: 60_000 };

      it('registers a worker with its first heartbeat, refreshes it with the next, and removes it', async () => {
        const s = await openOn(await freshDatabase());
        await s.workers.heartbeat(beat('w1'));
        const [first] = await s.workers.list(TENANT, LIVE);
        expect(first).toMatchObject({
          workerId: 'w1',
          kind: 'worker',
          host: 'host-a',
          pid: 4242,
          live: true,
        });
        expect(first?.runs).toEqual([]);
        await new Promise((resolve) => setTimeout(resolve, 20));
        await s.workers.heartbeat(beat('w1', { stopping: true, concurrency: 8 }));
        const [again] = await s.workers.list(TENANT, LIVE);
        expect(again).toMatchObject({ stopping: true, concurrency: 8, startedAt: first?.startedAt });
        expect(Date.parse(again!.lastHeartbeatAt)).toBeGreaterThan(Date.parse(first!.lastHeartbeatAt));
        await s.workers.remove('w1');
        expect(await s.workers.list(TENANT, LIVE)).toEqual([]);
      });

      it('shows the runs of the tenant asked about that each worker holds, and who is no longer heard from', async () => {
        const s = await openOn(await freshDatabase());
        const checkpoint = { messages: [], step: 0, pending: null };
        for (const [tenantId, runId] of [
          [TENANT, 'held_1'],
          ['other', 'held_2'],
          [TENANT, 'queued_3'],
        ] as const) {
          await s.runs.create({ tenantId, runId, agent: 'a', input: 'x', checkpoint });
        }
        await s.runs.claim(TENANT, 'held_1', 'w1', 60_000);
        await s.runs.claim('other', 'held_2', 'w1', 60_000);
        await s.workers.heartbeat(beat('w1'));
        await s.workers.heartbeat(beat('w2', { kind: 'serve', host: 'host-b' }));

        const mine = await s.workers.list(TENANT, LIVE);
        expect(mine.map((w) => [w.workerId, w.runs.map((r) => r.runId)])).toEqual([
          ['w1', ['held_1']],
          ['w2', []],
        ]);
        expect(mine[0]?.runs[0]).toMatchObject({ agent: 'a', leaseEpoch: 1 });
        expect(Date.parse(mine[0]!.runs[0]!.leaseExpiresAt)).toBeGreaterThan(Date.now());
        expect((await s.workers.list('other', LIVE))[0]?.runs.map((r) => r.runId)).toEqual(['held_2']);
        // Not heard from within liveMs: shown, not live; not within shownMs: not shown.
        await new Promise((resolve) => setTimeout(resolve, 20));
        expect((await s.workers.list(TENANT, { liveMs: 5 })).map((w) => w.live)).toEqual([false, false]);
        expect(await s.workers.list(TENANT, { liveMs: 5, shownMs: 5 })).toEqual([]);
      });

      it('forgets a worker not heard from for a day with the next heartbeat of any worker', async () => {
        const db = await freshDatabase();
        const s = await openOn(db);
        await s.workers.heartbeat(beat('gone'));
        await s.workers.heartbeat(beat('recent'));
        await withRaw(db, (raw) =>
          raw.query(`UPDATE workers SET heartbeat_at = '2000-01-01T00:00:00.000Z' WHERE worker_id = 'gone'`),
        );
        const week = { liveMs: 1000, shownMs: 1e12 };
        expect((await s.workers.list(TENANT, week)).map((w) => w.workerId).sort()).toEqual([
          'gone',
          'recent',
        ]);
        await s.workers.heartbeat(beat('recent'));
        expect((await s.workers.list(TENANT, week)).map((w) => w.workerId)).toEqual(['recent']);
      });
    });

    describe('tool slots', () => {
      it('gives out at most the limit, frees a released slot, and keeps one released with a hold', async () => {
        const s = await openOn(await freshDatabase());
        expect(await s.toolSlots.acquire('billing', 2, 'h1', 60_000)).toBe(0);
        expect(await s.toolSlots.acquire('billing', 2, 'h2', 60_000)).toBe(1);
        expect(await s.toolSlots.acquire('billing', 2, 'h3', 60_000)).toBeUndefined();
        expect(await s.toolSlots.acquire('other_tool', 2, 'h3', 60_000)).toBe(0);
        await s.toolSlots.release('billing', 0, 'someone-else', 0); // not its holder: nothing changes
        expect(await s.toolSlots.acquire('billing', 2, 'h3', 60_000)).toBeUndefined();
        await s.toolSlots.release('billing', 0, 'h1', 0);
        expect(await s.toolSlots.acquire('billing', 2, 'h3', 60_000)).toBe(0);
        // A release with a hold (a request that may still land) keeps the slot until then.
        await s.toolSlots.release('billing', 1, 'h2', 60_000);
        expect(await s.toolSlots.acquire('billing', 2, 'h4', 60_000)).toBeUndefined();
        expect((await s.toolSlots.held('billing')).map((h) => [h.slot, h.holder])).toEqual([
          [0, 'h3'],
          [1, 'h2'],
        ]);
      });

      it('takes over a slot whose lease expired; its old holder can no longer renew it', async () => {
        const s = await openOn(await freshDatabase());
        expect(await s.toolSlots.acquire('billing', 1, 'crashed', 30)).toBe(0);
        expect(await s.toolSlots.renew('billing', 0, 'crashed', 30)).toBe(true);
        await sleep(80);
        expect(await s.toolSlots.acquire('billing', 1, 'next', 60_000)).toBe(0);
        expect(await s.toolSlots.renew('billing', 0, 'crashed', 60_000)).toBe(false);
        expect(await s.toolSlots.renew('billing', 0, 'next', 60_000)).toBe(true);
        expect((await s.toolSlots.held('billing')).map((h) => h.holder)).toEqual(['next']);
      });

      it('never gives out more than the limit to two stores taking slots at once', async () => {
        const db = await freshDatabase();
        const [a, b] = await Promise.all([openOn(db), openOn(db)]);
        const taken = await Promise.all(
          Array.from({ length: 12 }, (_, i) =>
            (i % 2 === 0 ? a : b).toolSlots.acquire('billing', 3, `h${i}`, 60_000),
          ),
        );
        expect(taken.filter((t) => t !== undefined).sort()).toEqual([0, 1, 2]);
        expect(await a.toolSlots.held('billing')).toHaveLength(3);
      });
    });

    describe('transaction', () => {
      it('rolls back everything when fn throws', async () => {
        const existing = await reserveOne(request());
        const before = await snapshot(existing.idempotencyKey);
        const fresh = request();
        const boom = new Error('boom');
        await expect(
          store.transaction(async (tx) => {
            await tx.ledger.reserve([fresh], RUNTIME);
            const moved = await tx.ledger.transition(
              transitionOf(existing, { via: 'outcome', to: 'completed', result: { x: 1 } }),
            );
            expect(moved.applied).toBe(true);
            await tx.ledger.note({
              tenantId: TENANT,
              idempotencyKey: existing.idempotencyKey,
              actor: RUNTIME,
              reason: 'in tx',
            });
            expect((await tx.ledger.get(TENANT, fresh.idempotencyKey))?.status).toBe('started');
            throw boom;
          }),
        ).rejects.toBe(boom);
        expect(await snapshot(fresh.idempotencyKey)).toEqual({ record: undefined, history: [] });
        expect(await snapshot(existing.idempotencyKey)).toEqual(before);
        // The store is still usable afterwards.
        expect((await store.ledger.reserve([fresh], RUNTIME))[0]?.kind).toBe('reserved');
      });

      it('commits everything when fn resolves', async () => {
        const existing = await reserveOne(request());
        const fresh = request();
        const value = await store.transaction(async (tx) => {
          await tx.ledger.reserve([fresh], RUNTIME);
          await tx.ledger.transition(transitionOf(existing, { via: 'outcome', to: 'failed' }));
          return 42;
        });
        expect(value).toBe(42);
        expect((await store.ledger.get(TENANT, fresh.idempotencyKey))?.status).toBe('started');
        expect((await store.ledger.get(TENANT, existing.idempotencyKey))?.status).toBe('failed');
      });

      it('answers a refused transition with a rejected promise, in a transaction or not, writing nothing', async () => {
        const existing = await recordIn('completed');
        const before = await snapshot(existing.idempotencyKey);
        const refusedMove = transitionOf(existing, { via: 'outcome', to: 'failed' });
        let outside: Promise<unknown> | undefined;
        expect(() => (outside = store.ledger.transition(refusedMove))).not.toThrow();
        await expect(outside).rejects.toMatchObject({ code: 'LEDGER_TRANSITION_REFUSED' });
        await store.transaction(async (tx) => {
          let inside: Promise<unknown> | undefined;
          expect(() => (inside = tx.ledger.transition(refusedMove))).not.toThrow();
          await expect(inside).rejects.toMatchObject({ code: 'LEDGER_TRANSITION_REFUSED' });
        });
        expect(await snapshot(existing.idempotencyKey)).toEqual(before);
      });
    });

    describe('migrations', () => {
      const latest = latestVersion(loadMigrations(name === 'postgres' ? 'postgres' : 'sqlite'));

      it('applies each migration once; a second migrate() is a no-op', async () => {
        const db = await freshDatabase();
        const s = await openOn(db);
        expect(await s.schemaState()).toEqual({ state: 'current', version: latest });
        const rows = await migrationRows(db);
        expect(rows).toEqual(Array.from({ length: latest }, (_, i) => ({ version: i + 1, n: 1 })));
        expect(await s.migrate()).toEqual({ applied: [], version: latest });
        expect(await migrationRows(db)).toEqual(rows);
        expect(await s.schemaState()).toEqual({ state: 'current', version: latest });
      });

      it('lets two stores migrate one database at once', async () => {
        const db = await freshDatabase();
        const [a, b] = await Promise.all([openOn(db), openOn(db)]);
        expect(await migrationRows(db)).toEqual(
          Array.from({ length: latest }, (_, i) => ({ version: i + 1, n: 1 })),
        );
        expect(await a.schemaState()).toEqual({ state: 'current', version: latest });
        expect(await b.schemaState()).toEqual({ state: 'current', version: latest });
        const req = request();
        expect((await a.ledger.reserve([req], RUNTIME))[0]?.kind).toBe('reserved');
        expect((await b.ledger.reserve([req], RUNTIME))[0]?.kind).toBe('existing');
      });

      it('refuses a database whose schema is newer than the code', async () => {
        const db = await freshDatabase();
        const s = await openOn(db);
        await withRaw(db, (raw) =>
          raw.query(
            `INSERT INTO schema_migrations (version, name, applied_at) VALUES (${latest + 1}, 'from_the_future', '2099-01-01T00:00:00.000Z')`,
          ),
        );
        expect(await s.schemaState()).toEqual({ state: 'too-new', version: latest + 1, latest });
        expect(await codeOf(() => s.migrate())).toBe('SCHEMA_TOO_NEW');
        expect(await codeOf(() => openStore(db.url, { migrate: false }))).toBe('SCHEMA_TOO_NEW');
        expect(await codeOf(() => openStore(db.url, { migrate: true }))).toBe('SCHEMA_TOO_NEW');
        expect((await migrationRows(db)).map((r) => r.version)).toEqual([
          ...Array.from({ length: latest }, (_, i) => i + 1),
          latest + 1,
        ]);
      });

      it('refuses an unmigrated database when asked not to migrate, and leaves it unmigrated', async () => {
        const db = await freshDatabase();
        expect(await codeOf(() => openStore(db.url, { migrate: false }))).toBe('SCHEMA_OUTDATED');
        const tables = await withRaw(db, (raw) =>
          raw.query(
            name === 'postgres'
              ? `SELECT tablename AS name FROM pg_tables WHERE tablename = 'tool_executions'`
              : `SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'tool_executions'`,
          ),
        );
        expect(tables).toEqual([]);
      });
    });

    // Last: after every write path above has written to this database.
    it('keeps the counts of calls by tool and status and of runs by status equal to the rows', async () => {
      const stats = await store.monitor.stats({ marginMs: 0 });
      const [calls, runs] = await withRaw(opened, async (raw) => [
        await raw.query(
          'SELECT tool_name, status, COUNT(*) AS n FROM tool_executions GROUP BY tool_name, status',
        ),
        await raw.query('SELECT status, COUNT(*) AS n FROM runs GROUP BY status'),
      ]);
      const byKey = (rows: { key: string; n: number }[]) =>
        Object.fromEntries(rows.filter((r) => r.n !== 0).map((r) => [r.key, r.n]));
      expect(calls.length).toBeGreaterThanOrEqual(5);
      expect(byKey(stats.calls.map((c) => ({ key: `${c.toolName}/${c.status}`, n: c.count })))).toEqual(
        byKey(calls.map((r) => ({ key: `${String(r.tool_name)}/${String(r.status)}`, n: Number(r.n) }))),
      );
      expect(byKey(stats.runs.map((r) => ({ key: r.status, n: r.count })))).toEqual(
        byKey(runs.map((r) => ({ key: String(r.status), n: Number(r.n) }))),
      );
    });
  });
}
