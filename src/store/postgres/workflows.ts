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
  CLAIM_DUE_WORKFLOWS,
  CREATE_WORKFLOW_RUN,
  GET_WORKFLOW_RUN,
  LIST_WORKFLOW_RUNS,
  MOVE_WORKFLOW,
  WAKE_WORKFLOW,
  WORKFLOW_EVENTS,
} from '../workflows-sql.js';
import type { Queryable } from './ledger.js';

/** Events as the JSON rows the statements unpack, numbered so they keep their order. */
const eventRows = (events: readonly NewWorkflowEvent[]): string =>
  JSON.stringify(events.map((e, n) => ({ ...workflowEventColumns(e), n })));

/** Workflow runs on PostgreSQL; every method is one statement. */
export class PostgresWorkflows implements WorkflowStore {
  constructor(private readonly db: Queryable) {}

  async create(request: CreateWorkflowRunRequest): Promise<{ created: boolean; record: WorkflowRunRecord }> {
    const { rows } = await this.db.query<WorkflowRunRow>(CREATE_WORKFLOW_RUN.postgres, [
      request.tenantId,
      request.workflowRunId,
      request.workflow,
      JSON.stringify(request.input),
      request.inputDigest,
    ]);
    if (rows[0] !== undefined) return { created: true, record: toWorkflowRun(rows[0]) };
    const standing = await this.get(request.tenantId, request.workflowRunId);
    if (standing === undefined)
      throw new Error(`workflow run ${request.workflowRunId} was neither created nor found`);
    return { created: false, record: standing };
  }

  async get(tenantId: string, workflowRunId: string): Promise<WorkflowRunRecord | undefined> {
    const { rows } = await this.db.query<WorkflowRunRow>(GET_WORKFLOW_RUN.postgres, [
      tenantId,
      workflowRunId,
    ]);
    return rows[0] === undefined ? undefined : toWorkflowRun(rows[0]);
  }

  async list(tenantId: string, filter: WorkflowListFilter): Promise<WorkflowRunRecord[]> {
    const { rows } = await this.db.query<WorkflowRunRow>(LIST_WORKFLOW_RUNS.postgres, [
      tenantId,
      filter.statuses === undefined ? null : [...filter.statuses],
      filter.workflow ?? null,
      filter.before?.createdAt ?? null,
      filter.before?.workflowRunId ?? null,
      filter.limit,
    ]);
    return rows.map(toWorkflowRun);
  }

  async events(tenantId: string, workflowRunId: string, afterId = 0): Promise<WorkflowEvent[]> {
    const { rows } = await this.db.query<WorkflowEventRow>(WORKFLOW_EVENTS.postgres, [
      tenantId,
      workflowRunId,
      afterId,
    ]);
    return rows.map(toWorkflowEvent);
  }

  async claimDue(owner: string, leaseMs: number, limit: number): Promise<WorkflowRunRecord[]> {
    const { rows } = await this.db.query<WorkflowRunRow>(CLAIM_DUE_WORKFLOWS.postgres, [
      owner,
      leaseMs,
      limit,
    ]);
    return rows.map(toWorkflowRun);
  }

  async advance(request: AdvanceWorkflowRequest): Promise<boolean> {
    const { rows } = await this.db.query<{ moved: number }>(ADVANCE_WORKFLOW.postgres, [
      request.tenantId,
      request.workflowRunId,
      request.epoch,
      request.status,
      request.statusReason,
      jsonParam(request.result),
      jsonParam(request.error),
      Math.max(0, Math.round(request.wakeInMs)),
      eventRows(request.events),
    ]);
    return (rows[0]?.moved ?? 0) > 0;
  }

  async move(request: MoveWorkflowRequest): Promise<WorkflowRunRecord | undefined> {
    const { rows } = await this.db.query<WorkflowRunRow>(MOVE_WORKFLOW.postgres, [
      request.tenantId,
      request.workflowRunId,
      [...request.from],
      request.to,
      request.statusReason,
      jsonParam(request.error),
      eventRows(request.events),
    ]);
    return rows[0] === undefined ? undefined : toWorkflowRun(rows[0]);
  }

  async wake(tenantId: string, workflowRunId: string): Promise<void> {
    await this.db.query(WAKE_WORKFLOW.postgres, [tenantId, workflowRunId]);
  }
}
