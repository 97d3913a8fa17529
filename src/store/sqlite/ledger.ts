import type Database from 'better-sqlite3';
import {
  settles,
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
  transitionColumns,
  assertDistinctKeys,
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
import { isoNow, type Clock } from '../../util/clock.js';
import { settle } from './settle.js';
import {
  GET,
  HISTORY,
  REPEATS,
  repeatScopeParam,
  INSERT_EVENT,
  LIST,
  MARK_CONFLICT,
  REOPEN,
  REOPENABLE,
  RESERVE,
  TRANSITION,
} from '../ledger-sql.js';

interface EventValues {
  tenantId: string;
  idempotencyKey: string;
  kind: LedgerEvent['kind'];
  actor: Actor;
  via: LedgerEvent['via'];
  from: LedgerEvent['from'];
  to: LedgerEvent['to'];
  attempt: number;
  reason: string | null;
  detail: unknown;
}

function prepareStatements(db: Database.Database) {
  return {
    reserve: db.prepare<[Record<string, unknown>], ExecutionRow>(RESERVE.sqlite),
    reopen: db.prepare<[Record<string, unknown>], ExecutionRow>(REOPEN.sqlite),
    markConflict: db.prepare<[Record<string, unknown>]>(MARK_CONFLICT.sqlite),
    transition: db.prepare<[Record<string, unknown>], ExecutionRow>(TRANSITION.sqlite),
    event: db.prepare<[Record<string, unknown>]>(INSERT_EVENT.sqlite),
    get: db.prepare<[string, string], ExecutionRow>(GET.sqlite),
    history: db.prepare<[string, string], EventRow>(HISTORY.sqlite),
    repeatsIn: db.prepare<[string, string, string], ExecutionRow>(REPEATS.sqlite.run),
    repeatsInConversation: db.prepare<[string, string, string], ExecutionRow>(REPEATS.sqlite.conversation),
    repeatsSince: db.prepare<[string, string, string], ExecutionRow>(REPEATS.sqlite.tenant),
  };
}

/** The ledger on one better-sqlite3 connection. Each method is one synchronous transaction. */
export class SqliteLedger implements LedgerStore {
  private prepared: ReturnType<typeof prepareStatements> | undefined;

  constructor(
    private readonly db: Database.Database,
    private readonly clock: Clock,
  ) {}

  /** Prepared on first use: the tables exist only once the store has been migrated. */
  private get statements(): ReturnType<typeof prepareStatements> {
    this.prepared ??= prepareStatements(this.db);
    return this.prepared;
  }

  reserve(requests: readonly ReserveRequest[], actor: Actor): Promise<ReserveResult[]> {
    return settle(() => this.db.transaction(() => requests.map((r) => this.reserveOne(r, actor)))());
  }

  reserveUnlessRepeat(
    request: ReserveRequest,
    scope: InlineRepeatScope,
    actor: Actor,
  ): Promise<ReserveResult | { readonly kind: 'repeated' }> {
    return settle(() =>
      this.db.transaction((): ReserveResult | { readonly kind: 'repeated' } => {
        assertInlineRepeat(request);
        const statement =
          scope.kind === 'run' ? this.statements.repeatsIn : this.statements.repeatsInConversation;
        const earlier = statement
          .all(request.tenantId, JSON.stringify([request.repeatDigest]), repeatScopeParam(scope, String))
          .some((row) => row.idempotency_key !== request.idempotencyKey);
        if (!earlier) return this.reserveOne(request, actor);
        // The write lock is held: what stands for the key now is what the caller is answered with.
        const existing = this.statements.get.get(request.tenantId, request.idempotencyKey);
        return existing === undefined
          ? { kind: 'repeated' }
          : { kind: 'existing', record: toRecord(existing) };
      })(),
    );
  }

  private reserveOne(request: ReserveRequest, actor: Actor): ReserveResult {
    const now = isoNow(this.clock);
    const values = {
      tenantId: request.tenantId,
      idempotencyKey: request.idempotencyKey,
      runId: request.runId,
      toolCallId: request.toolCallId,
      toolName: request.toolName,
      effect: request.effect,
      args: JSON.stringify(request.args),
      argsDigest: request.argsDigest,
      compensationOf: request.compensationOf,
      attemptTimeoutMs: request.attemptTimeoutMs,
      repeatDigest: request.repeatDigest ?? null,
      conversationId: request.conversationId ?? null,
      now,
    };
    const row =
      request.reopenVersion === undefined
        ? this.statements.reserve.get(values)
        : this.statements.reopen.get({
            ...values,
            reopenable: REOPENABLE,
            reopenVersion: request.reopenVersion,
          });
    if (row === undefined) {
      const existing = this.statements.get.get(request.tenantId, request.idempotencyKey);
      if (existing === undefined)
        throw new Error(`reserve of ${request.idempotencyKey} wrote nothing and found nothing`);
      return { kind: 'existing', record: toRecord(existing) };
    }
    const record = toRecord(row);
    this.insertEvent(now, {
      tenantId: record.tenantId,
      idempotencyKey: record.idempotencyKey,
      kind: 'transition',
      actor,
      via: 'reserve',
      from: record.attempt === 1 ? null : (REOPENABLE ?? null),
      to: 'started',
      attempt: record.attempt,
      reason: record.attempt === 1 ? 'reserved' : 're-reserved after failed',
      detail: null,
    });
    return { kind: 'reserved', record };
  }

  transition(request: TransitionRequest): Promise<TransitionResult> {
    return settle(() => {
      assertTransitionRequest(request);
      return this.db.transaction(() => this.transitionSync(request))();
    });
  }

  transitions(requests: readonly TransitionRequest[]): Promise<TransitionResult[]> {
    return settle(() => {
      assertDistinctKeys(requests);
      requests.forEach(assertTransitionRequest);
      return this.db.transaction(() => requests.map((r) => this.transitionSync(r)))();
    });
  }

  private transitionSync(request: TransitionRequest): TransitionResult {
    const now = isoNow(this.clock);
    const columns = transitionColumns(request.to, request);
    const row = this.statements.transition.get({
      tenantId: request.tenantId,
      idempotencyKey: request.idempotencyKey,
      to: request.to,
      now,
      setResult: columns.setResult ? 1 : 0,
      result: encodeJson(columns.result),
      resultReference: columns.resultReference,
      setError: columns.setError ? 1 : 0,
      error: encodeJson(columns.error),
      settles: settles(request.to) ? 1 : 0,
      actorKind: request.actor.kind,
      actorId: request.actor.id,
      expectStatus: request.expect.status,
      expectVersion: request.expect.version,
    });
    const current = row ?? this.statements.get.get(request.tenantId, request.idempotencyKey);
    if (current === undefined) return { applied: false, record: undefined };
    let record = toRecord(current);
    if (row === undefined && !request.recordIgnored) return { applied: false, record };
    const kind = row === undefined ? lossKind(request, record) : 'transition';
    this.insertEvent(now, {
      tenantId: request.tenantId,
      idempotencyKey: request.idempotencyKey,
      kind,
      actor: request.actor,
      via: request.via,
      from: row === undefined ? record.status : request.expect.status,
      to: request.to,
      attempt: row === undefined ? (request.attempt ?? record.attempt) : record.attempt,
      reason: request.reason,
      detail: ignoredDetail(request, row === undefined),
    });
    if (row !== undefined) return { applied: true, record };
    if (kind === 'conflict') {
      this.statements.markConflict.run({
        tenantId: request.tenantId,
        idempotencyKey: request.idempotencyKey,
        now,
      });
      const marked = this.statements.get.get(request.tenantId, request.idempotencyKey);
      if (marked !== undefined) record = toRecord(marked);
    }
    return kind === 'conflict' ? { applied: false, record, conflict: true } : { applied: false, record };
  }

  /** Reads, then writes: takes the write lock first, so a concurrent writer cannot make it fail as busy. */
  note(request: NoteRequest): Promise<void> {
    const now = isoNow(this.clock);
    return settle(() =>
      this.db
        .transaction(() => {
          const row = this.statements.get.get(request.tenantId, request.idempotencyKey);
          if (row === undefined) return;
          this.insertEvent(now, {
            tenantId: request.tenantId,
            idempotencyKey: request.idempotencyKey,
            kind: 'note',
            actor: request.actor,
            via: null,
            from: row.status as ToolExecutionRecord['status'],
            to: null,
            attempt: Number(row.attempt),
            reason: request.reason,
            detail: request.detail ?? null,
          });
        })
        .immediate(),
    );
  }

  get(tenantId: string, idempotencyKey: string): Promise<ToolExecutionRecord | undefined> {
    return settle(() => {
      const row = this.statements.get.get(tenantId, idempotencyKey);
      return row === undefined ? undefined : toRecord(row);
    });
  }

  getMany(keys: readonly LedgerKey[]): Promise<ToolExecutionRecord[]> {
    return settle(() =>
      keys.flatMap((k) => {
        const row = this.statements.get.get(k.tenantId, k.idempotencyKey);
        return row === undefined ? [] : [toRecord(row)];
      }),
    );
  }

  repeatsOf(
    tenantId: string,
    digests: readonly string[],
    scope: RepeatScope,
  ): Promise<ToolExecutionRecord[]> {
    if (digests.length === 0) return Promise.resolve([]);
    const statement =
      scope.kind === 'run'
        ? this.statements.repeatsIn
        : scope.kind === 'conversation'
          ? this.statements.repeatsInConversation
          : this.statements.repeatsSince;
    const param = repeatScopeParam(scope, (ms) => new Date(ms).toISOString());
    return settle(() => statement.all(tenantId, JSON.stringify(digests), param).map(toRecord));
  }

  /** One write transaction at a time holds SQLite's write lock: nothing more to take. */
  guardRepeats(): Promise<void> {
    return Promise.resolve();
  }

  history(tenantId: string, idempotencyKey: string): Promise<LedgerEvent[]> {
    return settle(() => this.statements.history.all(tenantId, idempotencyKey).map(toEvent));
  }

  list(tenantId: string, filter: ListFilter): Promise<ToolExecutionRecord[]> {
    const { text: sql, params } = LIST.sqlite(tenantId, filter);
    return settle(() =>
      this.db.prepare<[Record<string, unknown>], ExecutionRow>(sql).all(params).map(toRecord),
    );
  }

  private insertEvent(now: string, values: EventValues): void {
    this.statements.event.run({
      tenantId: values.tenantId,
      idempotencyKey: values.idempotencyKey,
      now,
      kind: values.kind,
      actorKind: values.actor.kind,
      actorId: values.actor.id,
      via: values.via,
      from: values.from,
      to: values.to,
      attempt: values.attempt,
      reason: values.reason,
      detail: encodeJson(values.detail),
    });
  }
}
