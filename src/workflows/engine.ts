import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { crashPoint } from '../crash/index.js';
import { errorInfo, OncelyError } from '../errors/index.js';
import {
  argsDigest,
  assertTenantId,
  toJsonValue,
  type JsonValue,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import { isFinalRunStatus, type RunRecord } from '../run-state/index.js';
import type { Runtime } from '../runs/index.js';
import type { CreateRunRequest } from '../store/index.js';
import {
  FINAL_WORKFLOW_STATUSES,
  type MoveWorkflowRequest,
  type NewWorkflowEvent,
  type WorkflowEvent,
  type WorkflowRunRecord,
  type WorkflowStatus,
} from '../store/workflow-store.js';
import { recoveryProblems, workflowRunIdOf, WORKFLOW_RUN_ID, type Workflow } from './define-workflow.js';
import { planWorkflow, RECHECK_MS, type NodeView, type StandingCall, type WorkflowPlan } from './plan.js';

/** What an operator may decide for a paused node. */
export const WORKFLOW_DECISIONS = ['retry', 'skip', 'fail'] as const;
export type WorkflowDecision = (typeof WORKFLOW_DECISIONS)[number];

/** How long a claim on a workflow run holds while it is advanced (an advance takes milliseconds). */
export const DEFAULT_WORKFLOW_LEASE_MS = 30_000;

export interface StartWorkflowRequest {
  readonly tenantId: string;
  readonly workflow: string;
  readonly input: unknown;
  /** A client-chosen id (1-96 of `A-Z a-z 0-9 _ . -`) makes starting idempotent; default `wf_…`. */
  readonly workflowRunId?: string;
}

/** A workflow run as it stands, with each node's state and runs. */
export interface WorkflowRunView extends WorkflowRunRecord {
  readonly nodes: readonly NodeView[];
}

export interface WorkflowEngineOptions {
  readonly log?: Pick<Logger, 'info' | 'warn' | 'error'>;
  /** How long a claim on a workflow run holds if its holder dies mid-advance; default 30 s. */
  readonly leaseMs?: number;
  /**
   * How soon a running workflow run is looked at again without a wake-up; default 30 s. A node run
   * that ends wakes its workflow run at once; this bounds the wait when the process that ended it
   * died before saying so.
   */
  readonly recheckMs?: number;
}

/** How many of an ended node run's calls are read to find the ones that stand. */
const CALLS_READ = 500;
const REASON_MAX = 500;

/**
 * Workflows on a runtime: starts, reads, cancels and advances workflow runs. The runtime's agents
 * are the nodes' agents; a workflow whose `retry` nodes could repeat an effect is refused here, when
 * the engine is made (`WORKFLOW_DEFINITION_INVALID`).
 *
 * @example
 * const workflows = new WorkflowEngine(runtime, [refundReview]);
 * await workflows.start({ tenantId: 'acme', workflow: 'refund-review', input: { order: 'ord_7' } });
 * startWorker(runtime, { workflows }); // advances them
 */
export class WorkflowEngine {
  readonly #byName = new Map<string, Workflow>();
  readonly #log: WorkflowEngineOptions['log'];
  readonly #leaseMs: number;
  readonly #recheckMs: number;

  constructor(
    readonly runtime: Runtime,
    workflows: readonly Workflow[],
    options: WorkflowEngineOptions = {},
  ) {
    const agents = runtime.agents;
    const problems: string[] = [];
    for (const workflow of workflows) {
      if (this.#byName.has(workflow.name)) problems.push(`two workflows are named "${workflow.name}"`);
      this.#byName.set(workflow.name, workflow);
      problems.push(...recoveryProblems(workflow, agents));
    }
    if (problems.length > 0) {
      throw new OncelyError('WORKFLOW_DEFINITION_INVALID', problems.join('; '), { details: { problems } });
    }
    this.#log = options.log;
    this.#leaseMs = options.leaseMs ?? DEFAULT_WORKFLOW_LEASE_MS;
    this.#recheckMs = options.recheckMs ?? RECHECK_MS;
  }

  get workflows(): readonly Workflow[] {
    return [...this.#byName.values()];
  }

  workflowNamed(name: string): Workflow {
    const workflow = this.#byName.get(name);
    if (workflow !== undefined) return workflow;
    const known = [...this.#byName.keys()];
    throw new OncelyError(
      'WORKFLOW_NOT_FOUND',
      `there is no workflow "${name}"; the workflows are: ${known.join(', ') || '(none)'}`,
      { details: { workflow: name } },
    );
  }

  /** Starts a workflow run (or finds the one its id names, with the same workflow and input). */
  async start(request: StartWorkflowRequest): Promise<{ created: boolean; workflowRun: WorkflowRunRecord }> {
    assertTenantId(request.tenantId);
    const workflow = this.workflowNamed(request.workflow);
    const workflowRunId = request.workflowRunId ?? `wf_${randomHex()}`;
    if (!WORKFLOW_RUN_ID.test(workflowRunId)) {
      throw new OncelyError(
        'WORKFLOW_INPUT_INVALID',
        `workflow run id ${JSON.stringify(workflowRunId)} is not valid; use 1-96 of A-Z a-z 0-9 _ . -`,
      );
    }
    const input = checkedInput(workflow, request.input);
    const inputDigest = argsDigest(input);
    const { created, record } = await this.runtime.store.workflows.create({
      tenantId: request.tenantId,
      workflowRunId,
      workflow: workflow.name,
      input,
      inputDigest,
    });
    if (!created && (record.workflow !== workflow.name || record.inputDigest !== inputDigest)) {
      throw new OncelyError(
        'WORKFLOW_CONFLICT',
        `workflow run ${workflowRunId} already exists with another workflow or input; nothing was started`,
        { details: { workflowRunId, workflow: record.workflow } },
      );
    }
    return { created, workflowRun: record };
  }

  /** The workflow run with each node's state and runs. */
  async get(tenantId: string, workflowRunId: string): Promise<WorkflowRunView> {
    const record = await this.#record(tenantId, workflowRunId);
    const workflow = this.#byName.get(record.workflow);
    if (workflow === undefined) return { ...record, nodes: [] };
    const plan = await this.#plan(workflow, record);
    return { ...record, nodes: plan.nodes };
  }

  list(
    tenantId: string,
    filter: { statuses?: readonly WorkflowStatus[]; workflow?: string; limit?: number } = {},
  ): Promise<WorkflowRunRecord[]> {
    assertTenantId(tenantId);
    return this.runtime.store.workflows.list(tenantId, { ...filter, limit: filter.limit ?? 50 });
  }

  events(tenantId: string, workflowRunId: string, afterId = 0): Promise<WorkflowEvent[]> {
    assertTenantId(tenantId);
    return this.runtime.store.workflows.events(tenantId, workflowRunId, afterId);
  }

  /**
   * Cancels a workflow run: it starts no more nodes, and its node runs not ended are cancelled. Nothing
   * is compensated: what a node's run did stands, as its ledger records say.
   */
  async cancel(
    tenantId: string,
    workflowRunId: string,
    request: { reason: string; actorId: string },
  ): Promise<WorkflowRunView> {
    const before = await this.#record(tenantId, workflowRunId);
    const reason = checkedReason(request.reason, 'a cancel');
    const moved = await this.runtime.store.workflows.move({
      tenantId,
      workflowRunId,
      from: ['running', 'awaiting_operator'],
      to: 'cancelled',
      statusReason: reason,
      events: [{ kind: 'workflow.status', reason, detail: { status: 'cancelled', by: request.actorId } }],
    });
    if (moved === undefined) {
      const now = await this.#record(tenantId, workflowRunId);
      // A cancel that stopped between its two writes (the process died) is finished by the next one.
      const finished = now.status === 'cancelled' ? await this.#cancelNodeRuns(now, request.actorId) : 0;
      throw new OncelyError(
        'WORKFLOW_ALREADY_FINAL',
        `workflow run ${workflowRunId} is already ${now.status}; ` +
          (finished > 0
            ? `its ${finished} node run(s) still going were cancelled now`
            : 'nothing was changed'),
        { details: { workflowRunId, status: now.status, was: before.status } },
      );
    }
    await this.#cancelNodeRuns(moved, request.actorId);
    return this.get(tenantId, workflowRunId);
  }

  /** Cancels the node runs of a cancelled workflow run that have not ended; how many. */
  async #cancelNodeRuns(record: WorkflowRunRecord, actorId: string): Promise<number> {
    const view = await this.get(record.tenantId, record.workflowRunId);
    let cancelled = 0;
    for (const node of view.nodes) {
      const run = node.attempts.at(-1)?.run;
      if (run === undefined || isFinalRunStatus(run.status)) continue;
      try {
        await this.runtime.cancel(record.tenantId, run.runId, {
          reason: `its workflow run ${record.workflowRunId} was cancelled: ${record.statusReason ?? 'cancelled'}`,
          actorId,
        });
        cancelled += 1;
      } catch (error) {
        // It ended meanwhile: nothing to cancel.
        if (!(error instanceof OncelyError && error.code === 'RUN_ALREADY_FINAL')) throw error;
      }
    }
    return cancelled;
  }

  /**
   * An operator's decision for a workflow run waiting on a paused node: `retry` starts the node's
   * next attempt (a fresh run, new keys: the operator has checked what the failed run did; the calls
   * of it that stand are recorded with the decision and told to the new run), `skip` skips the node
   * (and, as a false condition would, the nodes needing it) and the workflow goes on, `fail` ends the
   * workflow run failed.
   */
  async decide(
    tenantId: string,
    workflowRunId: string,
    request: { node: string; action: WorkflowDecision; reason: string; actorId: string },
  ): Promise<WorkflowRunView> {
    const view = await this.get(tenantId, workflowRunId);
    const reason = checkedReason(request.reason, 'a decision');
    const node = view.nodes.find((n) => n.name === request.node);
    const paused = view.status === 'awaiting_operator' && node?.state === 'failed';
    if (!paused || node === undefined) {
      throw new OncelyError(
        'WORKFLOW_NOT_PAUSED',
        `workflow run ${workflowRunId} is ${view.status}${node === undefined ? `, and has no node "${request.node}"` : `; node "${request.node}" is ${node.state}`}: there is nothing to decide`,
        { details: { workflowRunId, status: view.status } },
      );
    }
    const latest = node.attempts.at(-1);
    const by = { by: request.actorId };
    const resume = (events: NewWorkflowEvent[]): MoveWorkflowRequest => ({
      tenantId,
      workflowRunId,
      from: ['awaiting_operator'],
      to: 'running',
      statusReason: null,
      events: [...events, { kind: 'workflow.status', reason, detail: { status: 'running', ...by } }],
    });
    const standing: Record<string, JsonValue> =
      node.standingCalls.length === 0 || latest === undefined
        ? {}
        : { runId: latest.runId, standingCalls: node.standingCalls.map((c) => ({ ...c })) };
    const moves: Record<WorkflowDecision, () => MoveWorkflowRequest> = {
      retry: () =>
        resume([
          {
            kind: 'node.retry_allowed',
            node: node.name,
            attempt: (latest?.attempt ?? 0) + 1,
            reason,
            detail: { ...by, ...standing },
          },
        ]),
      skip: () =>
        resume([
          { kind: 'node.skipped', node: node.name, attempt: latest?.attempt ?? 0, reason, detail: by },
        ]),
      fail: () => ({
        tenantId,
        workflowRunId,
        from: ['awaiting_operator'],
        to: 'failed',
        statusReason: `${node.reason ?? `node "${node.name}" failed`}; an operator failed the workflow: ${reason}`,
        error: { code: 'WORKFLOW_NODE_FAILED', message: node.reason ?? `node "${node.name}" failed` },
        events: [{ kind: 'workflow.status', reason, detail: { status: 'failed', ...by } }],
      }),
    };
    const moved = await this.runtime.store.workflows.move(moves[request.action]());
    if (moved === undefined) {
      throw new OncelyError(
        'WORKFLOW_NOT_PAUSED',
        `workflow run ${workflowRunId} is no longer waiting; nothing was changed`,
        {
          details: { workflowRunId },
        },
      );
    }
    return this.get(tenantId, workflowRunId);
  }

  /** A node's run ended (or may have): its workflow run is looked at now. Cheap for any other run. */
  async runEnded(tenantId: string, runId: string): Promise<void> {
    const workflowRunId = workflowRunIdOf(runId);
    if (workflowRunId === undefined) return;
    await crashPoint('workflow.after-node-end');
    await this.runtime.store.workflows.wake(tenantId, workflowRunId);
  }

  /**
   * Claims the workflow runs that are due (at most `limit`) and advances each: starts the node runs
   * it is time for, ends or pauses the workflow. The number advanced.
   */
  async advanceDue(limit = 16): Promise<number> {
    const claimed = await this.runtime.store.workflows.claimDue(this.runtime.owner, this.#leaseMs, limit);
    let advanced = 0;
    for (const record of claimed) {
      try {
        if (await this.advance(record)) advanced += 1;
      } catch (error) {
        // Its claim runs out and another look finds it: nothing it wrote is half done.
        this.#log?.error(
          { err: errorInfo(error), workflowRunId: record.workflowRunId, tenantId: record.tenantId },
          'cannot advance the workflow run; it is looked at again when its claim expires',
        );
      }
    }
    return advanced;
  }

  /**
   * Advances one claimed workflow run: in one transaction, the node runs it starts (each by its
   * attempt's run id, so a run that exists is not started again), its events, and its new status,
   * fenced by the claim's epoch (a newer claim, or a cancel, refuses it all). False: it stood down.
   */
  async advance(record: WorkflowRunRecord): Promise<boolean> {
    const workflow = this.#byName.get(record.workflow);
    if (workflow === undefined) {
      this.#log?.warn(
        { workflowRunId: record.workflowRunId, workflow: record.workflow },
        'a workflow run of a workflow this process does not know; left for a process that does',
      );
      return false;
    }
    const plan = await this.#plan(workflow, record);
    const ids = plan.start.map((s) => s.runId);
    await crashPoint('workflow.before-advance');
    const written = await this.runtime.store
      .transaction(async (tx) => {
        for (const s of plan.start) {
          const run = this.runtime.newRun({
            tenantId: record.tenantId,
            agent: s.node.agent,
            runId: s.runId,
            input: s.input,
          });
          await tx.runs.create(withNotice(run, s.notice));
        }
        const moved = await tx.workflows.advance({
          tenantId: record.tenantId,
          workflowRunId: record.workflowRunId,
          epoch: record.leaseEpoch,
          // What ended before what it lets start: a node's needs' `node.ended` come before its `node.started`.
          events: [
            ...plan.events,
            ...plan.start.map((s) => ({
              kind: 'node.started' as const,
              node: s.node.name,
              attempt: s.attempt,
              runId: s.runId,
            })),
            ...(plan.status === 'running' ? [] : [statusEvent(plan)]),
          ],
          status: plan.status,
          statusReason: plan.statusReason,
          result: plan.result,
          error: plan.error,
          wakeInMs: plan.wakeInMs,
        });
        // A newer claim or a cancel: roll the node runs back with it.
        if (!moved) throw new StoodDown();
        return true;
      })
      .catch((error: unknown) => {
        if (error instanceof StoodDown) return false;
        throw error;
      });
    if (!written) {
      this.#log?.warn(
        { workflowRunId: record.workflowRunId },
        'workflow run taken over or cancelled; stood down',
      );
      return false;
    }
    if (ids.length > 0) {
      await crashPoint('workflow.after-node-start');
      this.#log?.info(
        { workflowRunId: record.workflowRunId, tenantId: record.tenantId, runs: ids },
        'workflow started node runs',
      );
    }
    if (plan.status !== 'running') {
      this.#log?.info(
        {
          workflowRunId: record.workflowRunId,
          tenantId: record.tenantId,
          status: plan.status,
          reason: plan.statusReason,
        },
        `workflow run is ${plan.status}`,
      );
    }
    return true;
  }

  async #record(tenantId: string, workflowRunId: string): Promise<WorkflowRunRecord> {
    assertTenantId(tenantId);
    const record = await this.runtime.store.workflows.get(tenantId, workflowRunId);
    if (record !== undefined) return record;
    throw new OncelyError('WORKFLOW_NOT_FOUND', `no workflow run ${workflowRunId} in this tenant`, {
      details: { workflowRunId },
    });
  }

  async #plan(workflow: Workflow, record: WorkflowRunRecord): Promise<WorkflowPlan> {
    const store = this.runtime.store;
    const events = await store.workflows.events(record.tenantId, record.workflowRunId);
    const runIds = events
      .filter((e) => e.kind === 'node.started' && e.runId !== null)
      .map((e) => e.runId as string);
    const runs = new Map<string, RunRecord>();
    const standingCallsOf = new Map<string, StandingCall[]>();
    for (const runId of runIds) {
      const run = await store.runs.get(record.tenantId, runId);
      if (run === undefined) continue;
      runs.set(runId, run);
      if (run.status === 'failed' || run.status === 'cancelled') {
        const calls = await store.ledger.list(record.tenantId, { runId, limit: CALLS_READ });
        const standing = calls.filter(stands).map(toStandingCall);
        if (standing.length > 0) standingCallsOf.set(runId, standing);
      }
    }
    return planWorkflow({
      workflow,
      workflowRunId: record.workflowRunId,
      input: record.input,
      events,
      runs,
      standingCallsOf,
      nowMs: this.runtime.clock.now(),
      recheckMs: this.#recheckMs,
    });
  }
}

class StoodDown extends Error {}

/**
 * Whether a call of an ended run took effect or may have, so a fresh run could repeat it: a non-read
 * call (not a compensation record) that is anything but plainly `failed`. A `failed` call that an
 * effect then contradicted (a conflict) took effect.
 */
function stands(record: ToolExecutionRecord): boolean {
  if (record.effect === 'read' || record.compensationOf !== null) return false;
  return record.status !== 'failed' || record.conflictAt !== null;
}

function toStandingCall(record: ToolExecutionRecord): StandingCall {
  return {
    idempotencyKey: record.idempotencyKey,
    toolName: record.toolName,
    status: record.status,
    conflict: record.status === 'failed' && record.conflictAt !== null,
    resultReference: record.resultReference,
  };
}

/** A node attempt's run as created: its input, and what it is told beside it (standing calls). */
function withNotice(run: CreateRunRequest, notice: string | undefined): CreateRunRequest {
  if (notice === undefined) return run;
  const [first, ...rest] = run.checkpoint.messages;
  const content = (first as { content: string }).content;
  return {
    ...run,
    checkpoint: {
      ...run.checkpoint,
      messages: [{ role: 'user', content: `${content}\n\n${notice}` }, ...rest],
    },
  };
}

function statusEvent(plan: WorkflowPlan): {
  kind: 'workflow.status';
  reason: string | null;
  detail: JsonValue;
} {
  return { kind: 'workflow.status', reason: plan.statusReason, detail: { status: plan.status } };
}

export function isFinalWorkflowStatus(status: WorkflowStatus): boolean {
  return FINAL_WORKFLOW_STATUSES.includes(status);
}

function checkedInput(workflow: Workflow, input: unknown): JsonValue {
  if (input === undefined) throw new OncelyError('WORKFLOW_INPUT_INVALID', 'a workflow run needs an input');
  let json: JsonValue;
  try {
    json = toJsonValue(input);
  } catch (cause) {
    throw new OncelyError(
      'WORKFLOW_INPUT_INVALID',
      `a workflow's input is JSON: ${errorInfo(cause).message}`,
    );
  }
  if (workflow.input === undefined) return json;
  const checked = workflow.input.check(json);
  if (checked.ok) return JSON.parse(JSON.stringify(checked.value)) as JsonValue;
  throw new OncelyError(
    'WORKFLOW_INPUT_INVALID',
    `the input of workflow "${workflow.name}" is not valid: ${checked.problems.join('; ')}`,
    { details: { workflow: workflow.name, problems: checked.problems } },
  );
}

function checkedReason(reason: unknown, what: string): string {
  if (typeof reason !== 'string' || reason.trim() === '' || reason.length > REASON_MAX) {
    throw new OncelyError('LEDGER_REASON_REQUIRED', `${what} needs a reason (1-${REASON_MAX} characters)`);
  }
  return reason.trim();
}

function randomHex(): string {
  return randomBytes(8).toString('hex');
}
