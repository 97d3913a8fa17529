import type { ErrorInfo, JsonValue } from '../ledger/index.js';

/** Where a workflow run stands. */
export const WORKFLOW_STATUSES = [
  'running',
  'awaiting_operator',
  'completed',
  'failed',
  'cancelled',
] as const;
export type WorkflowStatus = (typeof WORKFLOW_STATUSES)[number];
export const FINAL_WORKFLOW_STATUSES: readonly WorkflowStatus[] = ['completed', 'failed', 'cancelled'];

export interface WorkflowRunRecord {
  readonly tenantId: string;
  readonly workflowRunId: string;
  readonly workflow: string;
  readonly input: JsonValue;
  readonly inputDigest: string;
  readonly status: WorkflowStatus;
  readonly statusReason: string | null;
  readonly result: JsonValue | null;
  readonly error: ErrorInfo | null;
  /** Grows with every write of the row. */
  readonly version: number;
  readonly leaseOwner: string | null;
  /** Grows with every claim (and with a cancel): a write of an older holder is refused. */
  readonly leaseEpoch: number;
  readonly leaseExpiresAt: string | null;
  /** When a running workflow is looked at next. */
  readonly wakeAt: string;
  readonly createdAt: string;
  readonly updatedAt: string;
}

export const WORKFLOW_EVENT_KINDS = [
  'workflow.started',
  'workflow.status',
  'node.started',
  'node.ended',
  'node.skipped',
  'node.retry_allowed',
] as const;
export type WorkflowEventKind = (typeof WORKFLOW_EVENT_KINDS)[number];

export interface NewWorkflowEvent {
  readonly kind: WorkflowEventKind;
  readonly node?: string | null;
  readonly attempt?: number | null;
  readonly runId?: string | null;
  readonly reason?: string | null;
  readonly detail?: JsonValue | null;
}

export interface WorkflowEvent {
  readonly id: number;
  readonly tenantId: string;
  readonly workflowRunId: string;
  readonly at: string;
  readonly kind: WorkflowEventKind;
  readonly node: string | null;
  readonly attempt: number | null;
  readonly runId: string | null;
  readonly reason: string | null;
  readonly detail: JsonValue | null;
}

export interface CreateWorkflowRunRequest {
  readonly tenantId: string;
  readonly workflowRunId: string;
  readonly workflow: string;
  readonly input: JsonValue;
  readonly inputDigest: string;
}

/** What one advance of a workflow writes, fenced by the epoch of the claim it holds. */
export interface AdvanceWorkflowRequest {
  readonly tenantId: string;
  readonly workflowRunId: string;
  readonly epoch: number;
  /** Appended; a node's event of a kind and attempt that stands already is left as it is. */
  readonly events: readonly NewWorkflowEvent[];
  readonly status: WorkflowStatus;
  readonly statusReason: string | null;
  readonly result?: JsonValue | null;
  readonly error?: ErrorInfo | null;
  /** When to look again (a running workflow), from now. */
  readonly wakeInMs: number;
}

/** An operator's move of a workflow run, compare-and-set on its status. */
export interface MoveWorkflowRequest {
  readonly tenantId: string;
  readonly workflowRunId: string;
  /** The move happens only from one of these. */
  readonly from: readonly WorkflowStatus[];
  readonly to: WorkflowStatus;
  readonly statusReason: string | null;
  readonly error?: ErrorInfo | null;
  readonly events: readonly NewWorkflowEvent[];
}

export interface WorkflowListFilter {
  readonly statuses?: readonly WorkflowStatus[];
  readonly workflow?: string;
  readonly limit: number;
  /** Workflow runs strictly older than this one in (createdAt, workflowRunId) order. */
  readonly before?: { readonly createdAt: string; readonly workflowRunId: string };
}

/** Workflow runs and their events. Every write is one statement or one transaction. */
export interface WorkflowStore {
  /** Creates the run with its `workflow.started` event, unless it exists: then it is returned as it is. */
  create(request: CreateWorkflowRunRequest): Promise<{ created: boolean; record: WorkflowRunRecord }>;
  get(tenantId: string, workflowRunId: string): Promise<WorkflowRunRecord | undefined>;
  list(tenantId: string, filter: WorkflowListFilter): Promise<WorkflowRunRecord[]>;
  events(tenantId: string, workflowRunId: string, afterId?: number): Promise<WorkflowEvent[]>;
  /**
   * Claims running workflow runs that are due and whose lease is free or expired, each at a new
   * epoch, for `leaseMs`; of several claimers, one gets each.
   */
  claimDue(owner: string, leaseMs: number, limit: number): Promise<WorkflowRunRecord[]>;
  /** Writes an advance if the claim still holds (same epoch); lets the lease go. False: it did not. */
  advance(request: AdvanceWorkflowRequest): Promise<boolean>;
  /** Moves the run if its status is one of `from`; the epoch grows, so an advance in flight is refused. */
  move(request: MoveWorkflowRequest): Promise<WorkflowRunRecord | undefined>;
  /** A running workflow run is looked at now (one of its node's runs ended). */
  wake(tenantId: string, workflowRunId: string): Promise<void>;
}

type Time = string | Date;

export interface WorkflowRunRow {
  tenant_id: string;
  workflow_run_id: string;
  workflow: string;
  input: JsonValue | string;
  input_digest: string;
  status: WorkflowStatus;
  status_reason: string | null;
  result: JsonValue | string | null;
  error: ErrorInfo | string | null;
  version: number;
  lease_owner: string | null;
  lease_epoch: number | string;
  lease_expires_at: Time | null;
  wake_at: Time;
  created_at: Time;
  updated_at: Time;
}

export interface WorkflowEventRow {
  id: number | string;
  tenant_id: string;
  workflow_run_id: string;
  at: Time;
  kind: WorkflowEventKind;
  node: string | null;
  attempt: number | null;
  run_id: string | null;
  reason: string | null;
  detail: JsonValue | string | null;
}

const time = (t: Time): string => (typeof t === 'string' ? t : t.toISOString());
/** JSON comes back as text (SQLite's TEXT; PostgreSQL's jsonb, which the store leaves unparsed). */
function json<T>(value: T | string): T {
  return typeof value === 'string' ? (JSON.parse(value) as T) : value;
}

export function toWorkflowRun(row: WorkflowRunRow): WorkflowRunRecord {
  return {
    tenantId: row.tenant_id,
    workflowRunId: row.workflow_run_id,
    workflow: row.workflow,
    input: json(row.input),
    inputDigest: row.input_digest,
    status: row.status,
    statusReason: row.status_reason,
    result: row.result === null ? null : json<JsonValue>(row.result),
    error: row.error === null ? null : json<ErrorInfo>(row.error),
    version: row.version,
    leaseOwner: row.lease_owner,
    leaseEpoch: Number(row.lease_epoch),
    leaseExpiresAt: row.lease_expires_at === null ? null : time(row.lease_expires_at),
    wakeAt: time(row.wake_at),
    createdAt: time(row.created_at),
    updatedAt: time(row.updated_at),
  };
}

export function toWorkflowEvent(row: WorkflowEventRow): WorkflowEvent {
  return {
    id: Number(row.id),
    tenantId: row.tenant_id,
    workflowRunId: row.workflow_run_id,
    at: time(row.at),
    kind: row.kind,
    node: row.node,
    attempt: row.attempt,
    runId: row.run_id,
    reason: row.reason,
    detail: row.detail === null ? null : json<JsonValue>(row.detail),
  };
}

/** JSON text of a value or null, for a statement's parameter. */
export const jsonParam = (value: unknown): string | null =>
  value === undefined || value === null ? null : JSON.stringify(value);

/** A workflow event's columns, as both stores write them (PG_EVENTS_OF's record type, SQLite's insert). */
export interface WorkflowEventColumns {
  readonly kind: WorkflowEventKind;
  readonly node: string | null;
  readonly attempt: number | null;
  readonly run_id: string | null;
  readonly reason: string | null;
  readonly detail: JsonValue | null;
}

/** The columns of a new workflow event: what it does not say is null. */
export function workflowEventColumns(e: NewWorkflowEvent): WorkflowEventColumns {
  return {
    kind: e.kind,
    node: e.node ?? null,
    attempt: e.attempt ?? null,
    run_id: e.runId ?? null,
    reason: e.reason ?? null,
    detail: e.detail ?? null,
  };
}
