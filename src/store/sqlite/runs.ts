import type Database from 'better-sqlite3';
import type { JsonValue } from '../../ledger/index.js';
import {
  FINAL_RUN_STATUSES,
  type ApprovalRecord,
  type RunEvent,
  type RunRecord,
  type RunStatus,
  type RunSummary,
  type RunTurn,
} from '../../run-state/index.js';
import type {
  ApprovalListFilter,
  CreateRunRequest,
  NewApproval,
  RunFence,
  RunListFilter,
  ReleaseRequest,
  RunStore,
  SaveCheckpointRequest,
  SendMessageRequest,
  SendMessageResult,
  TenantUsage,
  UsageFilter,
  WaitingCursor,
  WaitingRun,
} from '../run-store.js';
import {
  appendedMessages,
  releasesLease,
  toApproval,
  toRun,
  toRunEvent,
  toRunSummary,
  toWaiting,
  toRunTurn,
  sentMessage,
  unsentMessage,
  tenantUsage,
  usageParams,
  type UsageRow,
  type RunTurnRow,
  type ApprovalRow,
  type RunEventRow,
  type RunRow,
  type WaitingRow,
} from '../run-rows.js';
import { encodeJson } from '../rows.js';
import {
  APPEND_EVENT,
  APPROVALS_OF_RUN,
  APPROVALS_OF_RUNS,
  APPROVALS_PAGE,
  CANCEL,
  CLAIM,
  CLAIM_NEXT,
  CONSUME_APPROVAL,
  CREATE,
  CREATE_APPROVALS,
  DECIDE_APPROVAL,
  GET,
  GET_APPROVAL,
  LIST_WAITING,
  RELEASE,
  RENEW,
  REQUEUE,
  RETRY,
  LAST_CLAIMS,
  RUN_EVENTS,
  RUNS_PAGE,
  SAVE,
  SUMMARY,
  SEND_MESSAGE,
  TURN_BY_CLIENT_ID,
  TURNS,
  TENANT_USAGE,
} from '../runs-sql.js';
import { isoNow, type Clock } from '../../util/clock.js';
import { settle } from './settle.js';

/** Runs, events and approvals on one better-sqlite3 connection; each method is one transaction. */
export class SqliteRuns implements RunStore {
  constructor(
    private readonly db: Database.Database,
    private readonly clock: Clock,
  ) {}

  private now(): string {
    return isoNow(this.clock);
  }

  private later(ms: number): string {
    return new Date(this.clock.now() + ms).toISOString();
  }

  /** Appends an event numbered by the run's own sequence; callers run it inside their transaction. */
  private event(tenantId: string, runId: string, type: string, data: unknown, at = this.now()): void {
    const seq = this.nextSeq(tenantId, runId);
    this.db.prepare(APPEND_EVENT.sqlite.event).run(tenantId, runId, seq, at, type, JSON.stringify(data));
  }

  /** Moves the run's event seq on and returns it (inside the caller's transaction). */
  private nextSeq(tenantId: string, runId: string): number {
    const next = this.db
      .prepare<[string, string], { event_seq: number }>(APPEND_EVENT.sqlite.seq)
      .get(tenantId, runId);
    if (next === undefined) throw new Error(`no run ${runId} to append an event to`);
    return next.event_seq;
  }

  /**
   * Runs the change of a run (its first statement) and, when it changed the run, the statement that
   * writes its events (the rest, runs-sql.ts): what PostgreSQL does in one statement, in the caller's
   * transaction. The change's returned row, or undefined when it changed nothing.
   */
  private changeRun<R>(change: string, events: string, params: Record<string, unknown>): R | undefined {
    const row = this.db.prepare<[Record<string, unknown>], R>(change).get(params);
    if (row !== undefined) this.db.prepare(events).run(params);
    return row;
  }

  private row(tenantId: string, runId: string): RunRow | undefined {
    return this.db.prepare<[string, string], RunRow>(SUMMARY.sqlite).get(tenantId, runId);
  }

  /** The run of this row with its conversation, read in order (inside the caller's transaction). */
  private withMessages(row: RunRow): RunRecord {
    const messages = this.db
      .prepare<[string, string], { message: string }>(GET.sqlite.messages)
      .all(row.tenant_id, row.run_id)
      .map((m) => JSON.parse(m.message) as JsonValue);
    return toRun(row, messages);
  }

  /** Appends messages to a run's conversation from position `from` (inside the caller's transaction). */
  private append(tenantId: string, runId: string, from: number, messages: readonly JsonValue[]): void {
    const insert = this.db.prepare(SAVE.sqlite.message);
    messages.forEach((m, i) => insert.run(tenantId, runId, from + i, JSON.stringify(m)));
  }

  create(request: CreateRunRequest): Promise<{ created: boolean; run: RunRecord }> {
    return settle(() =>
      this.db.transaction(() => {
        const at = this.now();
        const inserted = this.db.prepare<[Record<string, unknown>], RunRow>(CREATE.sqlite.run).get({
          tenantId: request.tenantId,
          runId: request.runId,
          agent: request.agent,
          input: encodeJson(request.input),
          step: request.checkpoint.step,
          pending: encodeJson(request.checkpoint.pending),
          messageCount: request.checkpoint.messages.length,
          tokenBudget: request.tokenBudget ?? null,
          at,
        });
        if (inserted !== undefined) {
          this.append(request.tenantId, request.runId, 0, request.checkpoint.messages);
          this.db.prepare(CREATE.sqlite.event).run({ tenantId: request.tenantId, runId: request.runId, at });
          if (request.claim === undefined) {
            return { created: true, run: toRun(inserted, request.checkpoint.messages) };
          }
          // Claimed in the same transaction, as `claim` claims it.
          const { owner, leaseMs } = request.claim;
          const claimed = this.claimSync(request.tenantId, request.runId, owner, leaseMs, undefined, at);
          if (claimed === undefined) throw new Error(`run ${request.runId} created but not claimed`);
          return { created: true, run: claimed };
        }
        const existing = this.row(request.tenantId, request.runId);
        if (existing === undefined) throw new Error(`run ${request.runId} neither created nor found`);
        return { created: false, run: this.withMessages(existing) };
      })(),
    );
  }

  get(tenantId: string, runId: string): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db.transaction(() => {
        const row = this.row(tenantId, runId);
        return row === undefined ? undefined : this.withMessages(row);
      })(),
    );
  }

  summary(tenantId: string, runId: string): Promise<RunSummary | undefined> {
    return settle(() => {
      const row = this.row(tenantId, runId);
      return row === undefined ? undefined : toRunSummary(row);
    });
  }

  list(tenantId: string, filter: RunListFilter): Promise<RunSummary[]> {
    return settle(() => {
      const page = RUNS_PAGE.sqlite(tenantId, filter);
      return this.db.prepare<[Record<string, unknown>], RunRow>(page.text).all(page.params).map(toRunSummary);
    });
  }

  claimNext(owner: string, leaseMs: number, agents?: readonly string[]): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db
        .transaction(() => {
          const at = this.now();
          const row = this.db.prepare<[Record<string, unknown>], RunRow>(CLAIM_NEXT.sqlite.run).get({
            owner,
            at,
            expires: this.later(leaseMs),
            agents: agents === undefined ? null : JSON.stringify(agents),
          });
          if (row === undefined) return undefined;
          this.db.prepare(CLAIM_NEXT.sqlite.event).run({ tenantId: row.tenant_id, runId: row.run_id, at });
          return this.withMessages(row);
        })
        .immediate(),
    );
  }

  claim(
    tenantId: string,
    runId: string,
    owner: string,
    leaseMs: number,
    agents?: readonly string[],
  ): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db
        .transaction(() => this.claimSync(tenantId, runId, owner, leaseMs, agents, this.now()))
        .immediate(),
    );
  }

  /** Claims this run if it is claimable (and of one of `agents`), inside the caller's transaction. */
  private claimSync(
    tenantId: string,
    runId: string,
    owner: string,
    leaseMs: number,
    agents: readonly string[] | undefined,
    at: string,
  ): RunRecord | undefined {
    const row = this.changeRun<RunRow>(CLAIM.sqlite.run, CLAIM.sqlite.event, {
      owner,
      at,
      expires: this.later(leaseMs),
      tenantId,
      runId,
      agents: agents === undefined ? null : JSON.stringify(agents),
    });
    return row === undefined ? undefined : this.withMessages(row);
  }

  renewLease(fence: Omit<RunFence, 'checkpointVersion'>, owner: string, leaseMs: number): Promise<boolean> {
    return settle(() => this.renewSync(fence, owner, leaseMs));
  }

  private renewSync(fence: Omit<RunFence, 'checkpointVersion'>, owner: string, leaseMs: number): boolean {
    return (
      this.db
        .prepare(RENEW.sqlite)
        .run(this.later(leaseMs), fence.tenantId, fence.runId, fence.leaseEpoch, owner, this.now())
        .changes === 1
    );
  }

  saveCheckpoint(request: SaveCheckpointRequest): Promise<number | undefined> {
    return settle(() =>
      this.db.transaction(() => {
        const at = this.now();
        const { fence } = request;
        const renew = request.renewLease;
        const appended = appendedMessages(request);
        const events = request.events ?? [];
        const row = this.db
          .prepare<[Record<string, unknown>], { checkpoint_version: number; event_seq: number }>(
            SAVE.sqlite.run,
          )
          .get({
            tenantId: fence.tenantId,
            runId: fence.runId,
            epoch: fence.leaseEpoch,
            version: fence.checkpointVersion,
            pending: encodeJson(request.checkpoint.pending),
            step: request.checkpoint.step,
            appended: appended.length,
            stored: request.storedMessages,
            status: request.status,
            result: encodeJson(request.result ?? null),
            error: encodeJson(request.error ?? null),
            reason: request.reason ?? null,
            release: releasesLease(request.status) ? 1 : 0,
            modelAnswered: request.modelAnswered === true ? 1 : 0,
            renewOwner: renew?.owner ?? null,
            renewExpires: renew === undefined ? null : this.later(renew.leaseMs),
            events: events.length,
            ...usageParams(request.usage),
            at,
          });
        if (row === undefined) return undefined;
        this.append(fence.tenantId, fence.runId, request.storedMessages, appended);
        const insert = this.db.prepare(APPEND_EVENT.sqlite.event);
        const first = row.event_seq - events.length + 1;
        events.forEach((e, i) =>
          insert.run(fence.tenantId, fence.runId, first + i, at, e.type, JSON.stringify(e.data)),
        );
        return row.checkpoint_version;
      })(),
    );
  }

  requeue(tenantId: string, runId: string, from: readonly RunStatus[], reason: string): Promise<boolean> {
    return settle(() =>
      this.db.transaction(() => {
        const params = { tenantId, runId, reason, at: this.now(), from: JSON.stringify(from) };
        const changes = this.db.prepare(REQUEUE.sqlite.run).run(params).changes;
        if (changes === 1) this.db.prepare(REQUEUE.sqlite.event).run(params);
        return changes === 1;
      })(),
    );
  }

  cancel(tenantId: string, runId: string, reason: string, actorId: string): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db.transaction(() => {
        const row = this.changeRun<RunRow>(CANCEL.sqlite.run, CANCEL.sqlite.event, {
          tenantId,
          runId,
          reason,
          actor: actorId,
          at: this.now(),
          final: JSON.stringify(FINAL_RUN_STATUSES),
        });
        return row === undefined ? undefined : this.withMessages(row);
      })(),
    );
  }

  listWaiting(status: RunStatus, limit: number, after?: WaitingCursor): Promise<WaitingRun[]> {
    return settle(() =>
      this.db
        .prepare<[Record<string, unknown>], WaitingRow>(LIST_WAITING.sqlite)
        .all({
          status,
          limit,
          at: after?.at ?? null,
          tenantId: after?.tenantId ?? null,
          runId: after?.runId ?? null,
        })
        .map(toWaiting),
    );
  }

  release(request: ReleaseRequest): Promise<boolean> {
    return settle(() =>
      this.db
        .transaction(() => {
          const { fence } = request;
          const params = {
            tenantId: fence.tenantId,
            runId: fence.runId,
            epoch: fence.leaseEpoch,
            reason: request.reason,
            at: this.now(),
            retryAt: this.later(Math.max(0, Math.round(request.delayMs))),
            lastError: encodeJson(request.lastError ?? null),
            cause: request.cause,
          };
          const changes = this.db.prepare(RELEASE.sqlite.run).run(params).changes;
          if (changes === 1) this.db.prepare(RELEASE.sqlite.event).run(params);
          return changes === 1;
        })
        .immediate(),
    );
  }

  retry(tenantId: string, runId: string, reason: string, actorId: string): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db
        .transaction(() => {
          const row = this.changeRun<RunRow>(RETRY.sqlite.run, RETRY.sqlite.event, {
            tenantId,
            runId,
            reason,
            actor: actorId,
            at: this.now(),
          });
          return row === undefined ? undefined : this.withMessages(row);
        })
        .immediate(),
    );
  }

  sendMessage(request: SendMessageRequest): Promise<SendMessageResult | undefined> {
    return settle(() =>
      this.db
        .transaction((): SendMessageResult | undefined => {
          const { tenantId, runId } = request;
          // SEND_MESSAGE's parts in PostgreSQL's order: the run queued for its turn, then (when it
          // was) the message, the turn and the events, each reading the run as the first left it.
          const params = {
            tenantId,
            runId,
            clientMessageId: request.clientMessageId,
            message: JSON.stringify(request.message),
            messageDigest: request.messageDigest,
            reason: request.reason,
            actor: request.actorId,
            at: this.now(),
          };
          const row = this.db.prepare<[Record<string, unknown>], RunRow>(SEND_MESSAGE.sqlite.run).get(params);
          if (row === undefined) {
            const sent = this.db
              .prepare<[string, string, string], RunTurnRow>(TURN_BY_CLIENT_ID.sqlite)
              .get(tenantId, runId, request.clientMessageId);
            return unsentMessage(request, sent, this.row(tenantId, runId));
          }
          this.db.prepare(SEND_MESSAGE.sqlite.message).run(params);
          const turn = this.db
            .prepare<[Record<string, unknown>], { created_at: string }>(SEND_MESSAGE.sqlite.turn)
            .get(params);
          if (turn === undefined) throw new Error(`run ${runId} queued for a turn that was not written`);
          this.db.prepare(SEND_MESSAGE.sqlite.events).run(params);
          return sentMessage(request, row, turn.created_at);
        })
        .immediate(),
    );
  }

  turns(tenantId: string, runId: string): Promise<RunTurn[]> {
    return settle(() =>
      this.db.prepare<[string, string], RunTurnRow>(TURNS.sqlite).all(tenantId, runId).map(toRunTurn),
    );
  }

  usage(tenantId: string, filter: UsageFilter): Promise<TenantUsage> {
    return settle(() =>
      tenantUsage(
        this.db.prepare<[Record<string, unknown>], UsageRow>(TENANT_USAGE.sqlite).all({
          tenantId,
          from: filter.from ?? null,
          to: filter.to ?? null,
        }),
      ),
    );
  }

  appendEvent(tenantId: string, runId: string, type: string, data: JsonValue): Promise<void> {
    return settle(() => this.db.transaction(() => this.event(tenantId, runId, type, data)).immediate());
  }

  events(tenantId: string, runId: string, afterSeq: number, limit: number): Promise<RunEvent[]> {
    return settle(() =>
      this.db
        .prepare<[string, string, number, number], RunEventRow>(RUN_EVENTS.sqlite)
        .all(tenantId, runId, afterSeq, limit)
        .map(toRunEvent),
    );
  }

  lastClaims(tenantId: string, runId: string, limit: number): Promise<RunEvent[]> {
    return settle(() =>
      this.db
        .prepare<[string, string, number], RunEventRow>(LAST_CLAIMS.sqlite)
        .all(tenantId, runId, limit)
        .map(toRunEvent),
    );
  }

  createApprovals(approvals: readonly NewApproval[]): Promise<void> {
    return settle(() =>
      this.db.transaction(() => {
        const insert = this.db.prepare(CREATE_APPROVALS.sqlite);
        const at = this.now();
        for (const a of approvals)
          insert.run({ ...a, args: JSON.stringify(a.args), repeatOf: a.repeatOf ?? null, at });
      })(),
    );
  }

  getApproval(tenantId: string, idempotencyKey: string): Promise<ApprovalRecord | undefined> {
    return settle(() => {
      const row = this.db
        .prepare<[string, string], ApprovalRow>(GET_APPROVAL.sqlite)
        .get(tenantId, idempotencyKey);
      return row === undefined ? undefined : toApproval(row);
    });
  }

  approvalsOfRuns(
    runs: readonly { readonly tenantId: string; readonly runId: string }[],
  ): Promise<ApprovalRecord[]> {
    return settle(() => {
      const statement = this.db.prepare<[string, string], ApprovalRow>(APPROVALS_OF_RUNS.sqlite);
      return runs.flatMap((r) => statement.all(r.tenantId, r.runId).map(toApproval));
    });
  }

  approvalsOfRun(tenantId: string, runId: string): Promise<ApprovalRecord[]> {
    return settle(() =>
      this.db
        .prepare<[string, string], ApprovalRow>(APPROVALS_OF_RUN.sqlite)
        .all(tenantId, runId)
        .map(toApproval),
    );
  }

  listApprovals(tenantId: string, filter: ApprovalListFilter): Promise<ApprovalRecord[]> {
    return settle(() => {
      const page = APPROVALS_PAGE.sqlite(tenantId, filter);
      return this.db
        .prepare<[Record<string, unknown>], ApprovalRow>(page.text)
        .all(page.params)
        .map(toApproval);
    });
  }

  decideApproval(
    tenantId: string,
    idempotencyKey: string,
    decision: 'approved' | 'rejected',
    actorId: string,
    reason: string | null,
  ): Promise<ApprovalRecord | undefined> {
    return settle(() => {
      const row = this.db
        .prepare<[string, string, string | null, string, string, string], ApprovalRow>(DECIDE_APPROVAL.sqlite)
        .get(decision, actorId, reason, this.now(), tenantId, idempotencyKey);
      return row === undefined ? undefined : toApproval(row);
    });
  }

  consumeApproval(tenantId: string, idempotencyKey: string, argsDigest: string): Promise<boolean> {
    return settle(
      () =>
        this.db.prepare(CONSUME_APPROVAL.sqlite).run(this.now(), tenantId, idempotencyKey, argsDigest)
          .changes === 1,
    );
  }
}
