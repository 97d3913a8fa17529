import type pg from 'pg';
import { prepared } from './prepared.js';
import {
  type Actor,
  type LedgerEvent,
  type RepeatScope,
  type ToolExecutionRecord,
} from '../../ledger/index.js';
import {
  assertInlineRepeat,
  encodeJson,
  assertTransitionRequest,
  ignoredDetail,
  lossKind,
  toEvent,
  toRecord,
  type EventRow,
  type ExecutionRow,
} from '../rows.js';
import type {
  InlineRepeatScope,
  LedgerKey,
  LedgerStore,
  ListFilter,
  NoteRequest,
  ReserveRequest,
  ReserveResult,
  TransitionRequest,
  TransitionResult,
} from '../ledger-store.js';

import {
  EVENT_ON_CURRENT,
  GET,
  GET_ACROSS,
  GET_MANY,
  HISTORY,
  REPEATS,
  GUARD_REPEATS,
  repeatScopeParam,
  LIST,
  LOSS,
  LOSS_TRIES,
  REOPEN,
  REOPENABLE,
  RESERVE,
  RESERVE_ONE,
  RESERVE_ONE_UNLESS_REPEAT,
  TRANSITION,
  TRANSITIONS,
  reserveOneParams,
  reserveParams,
  transitionParams,
  transitionsParams,
} from '../ledger-sql.js';

/** Anything that runs a query: the pool, or one client inside a transaction. */
export type Queryable = Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>;

/** The ledger on PostgreSQL. Correctness rests on single statements and the primary key alone. */
export class PostgresLedger implements LedgerStore {
  constructor(private readonly db: Queryable) {}

  async reserve(requests: readonly ReserveRequest[], actor: Actor): Promise<ReserveResult[]> {
    const first = requests[0];
    if (first === undefined) return [];
    const fresh = requests.filter((r) => r.reopenVersion === undefined);
    const held = new Map<string, ToolExecutionRecord>();
    const stood = new Map<string, ToolExecutionRecord>();
    if (fresh.length > 0) {
      const [one] = fresh;
      const reserved = await this.db.query<ExecutionRow & { mine: boolean }>(
        ...(fresh.length === 1 && one !== undefined
          ? ([prepared('oncely_reserve_one', RESERVE_ONE.postgres), reserveOneParams(one, actor)] as const)
          : ([prepared('oncely_reserve', RESERVE.postgres), reserveParams(fresh, actor)] as const)),
      );
      for (const row of reserved.rows) (row.mine ? held : stood).set(row.idempotency_key, toRecord(row));
    }
    for (const r of requests) {
      if (r.reopenVersion === undefined) continue;
      const { rows } = await this.db.query<ExecutionRow>(REOPEN.postgres, [
        r.tenantId,
        r.idempotencyKey,
        REOPENABLE,
        r.reopenVersion,
        r.attemptTimeoutMs,
        r.argsDigest,
        r.toolName,
        actor.kind,
        actor.id,
      ]);
      if (rows[0] !== undefined) held.set(r.idempotencyKey, toRecord(rows[0]));
    }
    return this.answer(requests, held, stood);
  }

  async reserveUnlessRepeat(
    request: ReserveRequest,
    scope: InlineRepeatScope,
    actor: Actor,
  ): Promise<ReserveResult | { readonly kind: 'repeated' }> {
    assertInlineRepeat(request);
    const { rows } = await this.db.query<ExecutionRow & { mine: boolean }>(
      prepared(`oncely_reserve_one_unless_${scope.kind}`, RESERVE_ONE_UNLESS_REPEAT.postgres[scope.kind]),
      [...reserveOneParams(request, actor), repeatScopeParam(scope, String)],
    );
    const row = rows[0];
    if (row === undefined) return { kind: 'repeated' };
    return { kind: row.mine ? 'reserved' : 'existing', record: toRecord(row) };
  }

  /**
   * Each reservation's answer: the record this caller now holds (`mine`, by key), else the record
   * that stood (`stood`, read with the reservation), else the record that stands, read in one
   * statement.
   */
  async answer(
    requests: readonly ReserveRequest[],
    mine: ReadonlyMap<string, ToolExecutionRecord>,
    stood: ReadonlyMap<string, ToolExecutionRecord> = new Map(),
  ): Promise<ReserveResult[]> {
    const first = requests[0];
    const existing = new Map(stood);
    const others = requests
      .filter((r) => !mine.has(r.idempotencyKey) && !stood.has(r.idempotencyKey))
      .map((r) => r.idempotencyKey);
    if (first !== undefined && others.length > 0) {
      const rows = await this.db.query<ExecutionRow>(prepared('oncely_get_many', GET_MANY.postgres), [
        first.tenantId,
        others,
      ]);
      for (const row of rows.rows) existing.set(row.idempotency_key, toRecord(row));
    }
    return requests.map((r) => {
      const record = mine.get(r.idempotencyKey);
      if (record !== undefined) return { kind: 'reserved', record };
      const stood = existing.get(r.idempotencyKey);
      if (stood === undefined)
        throw new Error(`reserve of ${r.idempotencyKey} wrote nothing and found nothing`);
      return { kind: 'existing', record: stood };
    });
  }

  async transition(request: TransitionRequest): Promise<TransitionResult> {
    assertTransitionRequest(request);
    const updated = await this.db.query<ExecutionRow>(
      prepared('oncely_transition', TRANSITION.postgres),
      transitionParams(request),
    );
    const row = updated.rows[0];
    if (row !== undefined) return { applied: true, record: toRecord(row) };
    return this.missed(request);
  }

  async transitions(requests: readonly TransitionRequest[]): Promise<TransitionResult[]> {
    const first = requests[0];
    if (first === undefined) return [];
    if (requests.length === 1 || requests.some((r) => r.tenantId !== first.tenantId)) {
      const results: TransitionResult[] = [];
      for (const r of requests) results.push(await this.transition(r));
      return results;
    }
    const updated = await this.db.query<ExecutionRow & { n: string }>(
      prepared('oncely_transitions', TRANSITIONS.postgres),
      transitionsParams(requests),
    );
    return this.resultsOf(requests, updated.rows);
  }

  /**
   * The results of a batch of transitions from the rows that applied (each with its request's
   * position \`n\`); each that did not is answered as \`transition\` answers a lost move.
   */
  async resultsOf(
    requests: readonly TransitionRequest[],
    rows: readonly (ExecutionRow & { n: string | null })[],
  ): Promise<TransitionResult[]> {
    const applied = new Map<number, ToolExecutionRecord>();
    for (const row of rows) if (row.n !== null) applied.set(Number(row.n) - 1, toRecord(row));
    const results: TransitionResult[] = [];
    for (const [i, r] of requests.entries()) {
      const record = applied.get(i);
      results.push(record === undefined ? await this.missed(r) : { applied: true, record });
    }
    return results;
  }

  /** A move whose compare-and-set lost: the record as it stands, and the loss filed if asked. */
  private async missed(request: TransitionRequest): Promise<TransitionResult> {
    const current = await this.get(request.tenantId, request.idempotencyKey);
    if (!request.recordIgnored || current === undefined) return { applied: false, record: current };
    return this.fileLoss(request, current);
  }

  /** Files a lost outcome as `ignored` or `conflict`, decided against the record as read. */
  private async fileLoss(request: TransitionRequest, seen: ToolExecutionRecord): Promise<TransitionResult> {
    let current: ToolExecutionRecord | undefined = seen;
    for (let i = 0; i < LOSS_TRIES && current !== undefined; i++) {
      const kind = lossKind(request, current);
      const filed = await this.db.query(LOSS.postgres, [
        request.tenantId,
        request.idempotencyKey,
        kind,
        request.actor.kind,
        request.actor.id,
        request.via,
        request.to,
        request.reason,
        encodeJson(ignoredDetail(request, true)),
        current.version,
        request.attempt ?? current.attempt,
      ]);
      // Filed against the version read: an ignored outcome left that record as it was; a conflict
      // marked it, so it is read again.
      if (filed.rowCount === 1 && kind === 'ignored') return { applied: false, record: current };
      const after = await this.get(request.tenantId, request.idempotencyKey);
      if (filed.rowCount === 1) return { applied: false, record: after, conflict: true };
      current = after;
    }
    return { applied: false, record: current };
  }

  async note(request: NoteRequest): Promise<void> {
    await this.db.query(EVENT_ON_CURRENT.postgres, [
      request.tenantId,
      request.idempotencyKey,
      'note',
      request.actor.kind,
      request.actor.id,
      null,
      null,
      request.reason,
      encodeJson(request.detail ?? null),
    ]);
  }

  async get(tenantId: string, idempotencyKey: string): Promise<ToolExecutionRecord | undefined> {
    const { rows } = await this.db.query<ExecutionRow>(GET.postgres, [tenantId, idempotencyKey]);
    return rows[0] === undefined ? undefined : toRecord(rows[0]);
  }

  async getMany(keys: readonly LedgerKey[]): Promise<ToolExecutionRecord[]> {
    if (keys.length === 0) return [];
    const { rows } = await this.db.query<ExecutionRow>(GET_ACROSS.postgres, [
      keys.map((k) => k.tenantId),
      keys.map((k) => k.idempotencyKey),
    ]);
    return rows.map(toRecord);
  }

  async repeatsOf(
    tenantId: string,
    digests: readonly string[],
    scope: RepeatScope,
  ): Promise<ToolExecutionRecord[]> {
    if (digests.length === 0) return [];
    const param = repeatScopeParam(scope, (ms) => new Date(ms).toISOString());
    const sql: string = REPEATS.postgres[scope.kind];
    const { rows } = await this.db.query<ExecutionRow>(prepared(`oncely_repeats_${scope.kind}`, sql), [
      tenantId,
      digests,
      param,
    ]);
    return rows.map(toRecord);
  }

  async guardRepeats(tenantId: string, digests: readonly string[]): Promise<void> {
    if (digests.length === 0) return;
    await this.db.query(GUARD_REPEATS.postgres, [tenantId, digests]);
  }

  async history(tenantId: string, idempotencyKey: string): Promise<LedgerEvent[]> {
    const { rows } = await this.db.query<EventRow>(HISTORY.postgres, [tenantId, idempotencyKey]);
    return rows.map(toEvent);
  }

  async list(tenantId: string, filter: ListFilter): Promise<ToolExecutionRecord[]> {
    const { rows } = await this.db.query<ExecutionRow>(LIST.postgres(tenantId, filter));
    return rows.map(toRecord);
  }
}
