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
  earlierTurn,
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
import { STORE_RUN_EVENTS, type RunEventDefinition } from '../run-events.js';
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
  INSERT_TURN,
  TURN_BY_CLIENT_ID,
  TURNS,
  TENANT_USAGE,
  liteStoreEvent,
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
   * Appends an event the store writes itself, as both stores define it (run-events.ts): its data
   * from the run's row as it now stands and these parameters. Inside the caller's transaction.
   */
  private storeEvent(
    tenantId: string,
    runId: string,
    event: RunEventDefinition,
    params: Readonly<Record<string, string>>,
    at: string,
  ): void {
    this.nextSeq(tenantId, runId);
    const bound = Object.fromEntries(Object.entries(params).map(([name, v]) => [`p_${name}`, v]));
    this.db
      .prepare(liteStoreEvent(event, Object.keys(params)))
      .run({ ...bound, at, type: event.type, tenantId, runId });
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
        const inserted = this.db.prepare<[Record<string, unknown>], RunRow>(CREATE.sqlite).get({
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
          this.storeEvent(request.tenantId, request.runId, STORE_RUN_EVENTS.created, {}, at);
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
          const params = {
            owner,
            now: this.now(),
            expires: this.later(leaseMs),
            agents: agents === undefined ? null : JSON.stringify(agents),
          };
          const row = this.db.prepare<[Record<string, unknown>], RunRow>(CLAIM_NEXT.sqlite).get(params);
          return row === undefined ? undefined : this.claimed(row, params.now);
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
    const row = this.db.prepare<[Record<string, unknown>], RunRow>(CLAIM.sqlite).get({
      owner,
      now: at,
      expires: this.later(leaseMs),
      tenantId,
      runId,
      agents: agents === undefined ? null : JSON.stringify(agents),
    });
    return row === undefined ? undefined : this.claimed(row, at);
  }

  private claimed(row: RunRow, at: string): RunRecord {
    const run = this.withMessages(row);
    this.storeEvent(run.tenantId, run.runId, STORE_RUN_EVENTS.claimed, {}, at);
    return run;
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
        if (renew !== undefined && !this.renewSync(fence, renew.owner, renew.leaseMs)) return undefined;
        const row = this.db
          .prepare<[Record<string, unknown>], { checkpoint_version: number }>(SAVE.sqlite.run)
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
            ...usageParams(request.usage),
            at,
          });
        if (row === undefined) return undefined;
        this.append(fence.tenantId, fence.runId, request.storedMessages, appended);
        for (const e of request.events ?? []) this.event(fence.tenantId, fence.runId, e.type, e.data, at);
        return row.checkpoint_version;
      })(),
    );
  }

  requeue(tenantId: string, runId: string, from: readonly RunStatus[], reason: string): Promise<boolean> {
    return settle(() =>
      this.db.transaction(() => {
        const at = this.now();
        const changes = this.db
          .prepare(REQUEUE.sqlite)
          .run(reason, at, tenantId, runId, JSON.stringify(from)).changes;
        if (changes === 1) this.storeEvent(tenantId, runId, STORE_RUN_EVENTS.requeued, { reason }, at);
        return changes === 1;
      })(),
    );
  }

  cancel(tenantId: string, runId: string, reason: string, actorId: string): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db.transaction(() => {
        const at = this.now();
        const row = this.db
          .prepare<[string, string, string, string, string], RunRow>(CANCEL.sqlite)
          .get(reason, at, tenantId, runId, JSON.stringify(FINAL_RUN_STATUSES));
        if (row === undefined) return undefined;
        this.storeEvent(tenantId, runId, STORE_RUN_EVENTS.cancelled, { reason, actor: actorId }, at);
        return this.withMessages(row);
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
          const at = this.now();
          const { fence } = request;
          const retryAt = this.later(Math.max(0, Math.round(request.delayMs)));
          const changes = this.db.prepare(RELEASE.sqlite).run({
            tenantId: fence.tenantId,
            runId: fence.runId,
            epoch: fence.leaseEpoch,
            reason: request.reason,
            at,
            retryAt,
            lastError: encodeJson(request.lastError ?? null),
            cause: request.cause,
          }).changes;
          if (changes !== 1) return false;
          this.storeEvent(
            fence.tenantId,
            fence.runId,
            STORE_RUN_EVENTS.released,
            { reason: request.reason, cause: request.cause },
            at,
          );
          return true;
        })
        .immediate(),
    );
  }

  retry(tenantId: string, runId: string, reason: string, actorId: string): Promise<RunRecord | undefined> {
    return settle(() =>
      this.db
        .transaction(() => {
          const at = this.now();
          const row = this.db
            .prepare<[string, string, string, string], RunRow>(RETRY.sqlite)
            .get(reason, at, tenantId, runId);
          if (row === undefined) return undefined;
          this.storeEvent(tenantId, runId, STORE_RUN_EVENTS.retried, { reason, actor: actorId }, at);
          return this.withMessages(row);
        })
        .immediate(),
    );
  }

  sendMessage(request: SendMessageRequest): Promise<SendMessageResult | undefined> {
    return settle(() =>
      this.db
        .transaction((): SendMessageResult | undefined => {
          const { tenantId, runId } = request;
          const before = this.row(tenantId, runId);
          if (before === undefined) return undefined;
          const sent = this.db
            .prepare<[string, string, string], RunTurnRow>(TURN_BY_CLIENT_ID.sqlite)
            .get(tenantId, runId, request.clientMessageId);
          if (sent !== undefined) return earlierTurn(request, toRunTurn(sent), toRunSummary(before));
          const at = this.now();
          const row = this.db.prepare<[Record<string, unknown>], RunRow>(SEND_MESSAGE.sqlite).get({
            tenantId,
            runId,
            reason: request.reason,
            at,
          });
          if (row === undefined) return { kind: 'not_ready', run: toRunSummary(before) };
          const run = toRunSummary(row);
          const messageIndex = Number(row.message_count) - 1;
          this.append(tenantId, runId, messageIndex, [request.message]);
          const turn: RunTurn = {
            tenantId,
            runId,
            turn: run.turn,
            clientMessageId: request.clientMessageId,
            messageIndex,
            messageDigest: request.messageDigest,
            actorId: request.actorId,
            createdAt: at,
          };
          this.db.prepare(INSERT_TURN.sqlite).run({
            tenantId,
            runId,
            turn: turn.turn,
            clientMessageId: turn.clientMessageId,
            messageIndex,
            messageDigest: turn.messageDigest,
            actorId: turn.actorId,
            at,
          });
          this.storeEvent(
            tenantId,
            runId,
            STORE_RUN_EVENTS.messaged,
            { clientMessageId: request.clientMessageId, actor: request.actorId as string },
            at,
          );
          this.storeEvent(tenantId, runId, STORE_RUN_EVENTS.messageQueued, { reason: request.reason }, at);
          return { kind: 'sent', turn, run };
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
