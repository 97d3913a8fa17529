import type Database from 'better-sqlite3';
import {
  jsonParam,
  toWorkflowEvent,
  toWorkflowRun,
  workflowEventColumns,
  type AdvanceWorkflowRequest,
  type CreateWorkflowRunRequest,
  type MoveWorkflowRequest,
  type NewWorkflowEvent,
  type WorkflowEvent,
  type WorkflowEventRow,
  type WorkflowListFilter,
  type WorkflowRunRecord,
  type WorkflowRunRow,
  type WorkflowStore,
} from '../workflow-store.js';
import {
  ADVANCE_WORKFLOW,
  APPEND_WORKFLOW_EVENT,
  CLAIM_DUE_WORKFLOWS,
  CREATE_WORKFLOW_RUN,
  GET_WORKFLOW_RUN,
  LIST_WORKFLOW_RUNS,
  MOVE_WORKFLOW,
  WAKE_WORKFLOW,
  WORKFLOW_EVENTS,
} from '../workflows-sql.js';
import { isoNow, type Clock } from '../../util/clock.js';
import { settle } from './settle.js';

/** Workflow runs on one better-sqlite3 connection; a write of several statements is one transaction. */
export class SqliteWorkflows implements WorkflowStore {
  constructor(
    private readonly db: Database.Database,
    private readonly clock: Clock,
  ) {}

  private isoIn(ms: number): string {
    return new Date(this.clock.now() + ms).toISOString();
  }

  create(request: CreateWorkflowRunRequest): Promise<{ created: boolean; record: WorkflowRunRecord }> {
    return settle(() =>
      this.db.transaction(() => {
        const at = isoNow(this.clock);
        const row = this.db
          .prepare<[Record<string, unknown>], WorkflowRunRow>(CREATE_WORKFLOW_RUN.sqlite)
          .get({
            tenantId: request.tenantId,
            workflowRunId: request.workflowRunId,
            workflow: request.workflow,
            input: JSON.stringify(request.input),
            inputDigest: request.inputDigest,
            at,
          });
        if (row === undefined) {
          const standing = this.getSync(request.tenantId, request.workflowRunId);
          if (standing === undefined)
            throw new Error(`workflow run ${request.workflowRunId} was neither created nor found`);
          return { created: false, record: standing };
        }
        this.append(request.tenantId, request.workflowRunId, at, [
          { kind: 'workflow.started', detail: { workflow: request.workflow } },
        ]);
        return { created: true, record: toWorkflowRun(row) };
      })(),
    );
  }

  get(tenantId: string, workflowRunId: string): Promise<WorkflowRunRecord | undefined> {
    return settle(() => this.getSync(tenantId, workflowRunId));
  }

  list(tenantId: string, filter: WorkflowListFilter): Promise<WorkflowRunRecord[]> {
    return settle(() =>
      this.db
        .prepare<[Record<string, unknown>], WorkflowRunRow>(LIST_WORKFLOW_RUNS.sqlite)
        .all({
          tenantId,
          statuses: filter.statuses === undefined ? null : JSON.stringify(filter.statuses),
          workflow: filter.workflow ?? null,
          beforeAt: filter.before?.createdAt ?? null,
          beforeId: filter.before?.workflowRunId ?? null,
          limit: filter.limit,
        })
        .map(toWorkflowRun),
    );
  }

  events(tenantId: string, workflowRunId: string, afterId = 0): Promise<WorkflowEvent[]> {
    return settle(() =>
      this.db
        .prepare<[string, string, number], WorkflowEventRow>(WORKFLOW_EVENTS.sqlite)
        .all(tenantId, workflowRunId, afterId)
        .map(toWorkflowEvent),
    );
  }

  claimDue(owner: string, leaseMs: number, limit: number): Promise<WorkflowRunRecord[]> {
    return settle(() =>
      this.db
        .prepare<[Record<string, unknown>], WorkflowRunRow>(CLAIM_DUE_WORKFLOWS.sqlite)
        .all({ owner, at: isoNow(this.clock), expiresAt: this.isoIn(leaseMs), limit })
        .map(toWorkflowRun),
    );
  }

  advance(request: AdvanceWorkflowRequest): Promise<boolean> {
    return settle(() =>
      this.db.transaction(() => {
        const at = isoNow(this.clock);
        const moved = this.db
          .prepare<[Record<string, unknown>], { version: number }>(ADVANCE_WORKFLOW.sqlite)
          .get({
            tenantId: request.tenantId,
            workflowRunId: request.workflowRunId,
            epoch: request.epoch,
            status: request.status,
            statusReason: request.statusReason,
            result: jsonParam(request.result),
            error: jsonParam(request.error),
            wakeAt: this.isoIn(Math.max(0, request.wakeInMs)),
            at,
          });
        if (moved === undefined) return false;
        this.append(request.tenantId, request.workflowRunId, at, request.events);
        return true;
      })(),
    );
  }

  move(request: MoveWorkflowRequest): Promise<WorkflowRunRecord | undefined> {
    return settle(() =>
      this.db.transaction(() => {
        const at = isoNow(this.clock);
        const row = this.db.prepare<[Record<string, unknown>], WorkflowRunRow>(MOVE_WORKFLOW.sqlite).get({
          tenantId: request.tenantId,
          workflowRunId: request.workflowRunId,
          from: JSON.stringify(request.from),
          to: request.to,
          statusReason: request.statusReason,
          error: jsonParam(request.error),
          at,
        });
        if (row === undefined) return undefined;
        this.append(request.tenantId, request.workflowRunId, at, request.events);
        return toWorkflowRun(row);
      })(),
    );
  }

  wake(tenantId: string, workflowRunId: string): Promise<void> {
    return settle(() => {
      this.db.prepare(WAKE_WORKFLOW.sqlite).run({ tenantId, workflowRunId, at: isoNow(this.clock) });
    });
  }

  /**
   * The events of a create, an advance or a move, after its change and only when it changed the run:
   * PostgreSQL's `appended` (workflows-sql.ts), one insert a row, the same columns in the same order.
   */
  private append(
    tenantId: string,
    workflowRunId: string,
    at: string,
    events: readonly NewWorkflowEvent[],
  ): void {
    const insert = this.db.prepare(APPEND_WORKFLOW_EVENT.sqlite);
    for (const e of events) {
      const c = workflowEventColumns(e);
      insert.run({ tenantId, workflowRunId, at, ...c, runId: c.run_id, detail: jsonParam(c.detail) });
    }
  }

  private getSync(tenantId: string, workflowRunId: string): WorkflowRunRecord | undefined {
    const row = this.db
      .prepare<[string, string], WorkflowRunRow>(GET_WORKFLOW_RUN.sqlite)
      .get(tenantId, workflowRunId);
    return row === undefined ? undefined : toWorkflowRun(row);
  }
}
