import type { ErrorInfo, JsonValue, LedgerStatus } from '../ledger/index.js';
import { isFinalRunStatus, type RunRecord } from '../run-state/index.js';
import type { NewWorkflowEvent, WorkflowEvent, WorkflowStatus } from '../store/workflow-store.js';
import { nodeRunId, type Workflow, type WorkflowContext, type WorkflowNode } from './define-workflow.js';

/*
 * What a workflow run does next, decided from what is recorded: its events (which node attempts were
 * started, skipped, allowed again) and its node runs as they stand. Pure: the engine reads, asks
 * this, and writes what it says in one fenced write. Any process asking it of the same records gets
 * the same answer, and a node attempt's run id is fixed, so a repeated advance starts nothing twice.
 */

/** Where one node stands. */
export type NodeState =
  | 'waiting' // its needs have not all completed
  | 'running' // its latest attempt's run has not ended
  | 'completed'
  | 'skipped'
  | 'failed' // its run failed and the node will not run again (the workflow fails or waits)
  | 'retrying' // its run failed; another attempt is due
  | 'blocked'; // a node it needs failed

export interface NodeAttempt {
  readonly attempt: number;
  readonly runId: string;
  /** The run as it stands; undefined if it cannot be read (it is then taken as not ended). */
  readonly run: RunRecord | undefined;
}

export interface NodeView {
  readonly name: string;
  readonly agent: string;
  readonly state: NodeState;
  readonly attempts: readonly NodeAttempt[];
  readonly reason: string | null;
  /**
   * The non-read calls of its latest attempt's run, when that run failed or was cancelled, that took
   * effect or may have: what a fresh run could repeat. Empty otherwise.
   */
  readonly standingCalls: readonly StandingCall[];
}

/**
 * A non-read call of an ended node run that took effect (`completed`, `compensated`, or `failed`
 * but contradicted by an effect that landed: a conflict) or may have (`started`, `indeterminate`).
 * A fresh run of the node has new keys, so it could repeat any of these.
 */
export interface StandingCall {
  readonly idempotencyKey: string;
  readonly toolName: string;
  readonly status: LedgerStatus;
  /** True for a call settled `failed` that an effect then contradicted. */
  readonly conflict: boolean;
  readonly resultReference: string | null;
}

/** What the engine knows when it plans. */
export interface PlanFacts {
  readonly workflow: Workflow;
  readonly workflowRunId: string;
  readonly input: JsonValue;
  readonly events: readonly WorkflowEvent[];
  /** Each started attempt's run, by run id. */
  readonly runs: ReadonlyMap<string, RunRecord>;
  /** The standing calls of each ended (failed or cancelled) node run that has any, by run id. */
  readonly standingCallsOf: ReadonlyMap<string, readonly StandingCall[]>;
  readonly nowMs: number;
  /** How soon a running workflow run is looked at again without a wake-up (default RECHECK_MS). */
  readonly recheckMs?: number;
}

export interface StartNode {
  readonly node: WorkflowNode;
  readonly attempt: number;
  readonly runId: string;
  readonly input: unknown;
  /**
   * What the run is told beside its input: the calls of an earlier attempt that stand, when an
   * operator let the node run again knowing of them.
   */
  readonly notice?: string;
}

export interface WorkflowPlan {
  readonly nodes: readonly NodeView[];
  readonly start: readonly StartNode[];
  readonly events: readonly NewWorkflowEvent[];
  readonly status: WorkflowStatus;
  readonly statusReason: string | null;
  readonly result: JsonValue | null;
  readonly error: ErrorInfo | null;
  /** When to look again, if still running (a retry's backoff, or a safety recheck). */
  readonly wakeInMs: number;
  /** A node input, condition or result function threw: the workflow fails with it. */
  readonly threw?: ErrorInfo;
}

/** Without a wake-up (a node run that ended wakes its workflow), a running workflow is looked at this often. */
export const RECHECK_MS = 30_000;
/** How many standing calls a reason names before it says how many more there are. */
const CALLS_NAMED = 5;

/** One standing call as a person reads it: `issue_credit run_1:call_2 completed (ref re_9)`. */
export function describeStandingCall(call: StandingCall): string {
  const status = call.conflict
    ? 'settled failed, then took effect (a conflict)'
    : call.status === 'started' || call.status === 'indeterminate'
      ? `unknown (${call.status})`
      : call.status;
  const ref = call.resultReference === null ? '' : `, reference ${call.resultReference}`;
  return `${call.toolName} ${call.idempotencyKey}: ${status}${ref}`;
}

function describeStandingCalls(calls: readonly StandingCall[]): string {
  const named = calls.slice(0, CALLS_NAMED).map(describeStandingCall).join('; ');
  return calls.length > CALLS_NAMED ? `${named}; and ${calls.length - CALLS_NAMED} more` : named;
}

/**
 * What a node's next run is told when an operator let it run again although calls of an earlier
 * attempt stand: a fresh run has new keys, so only the model can avoid repeating them.
 */
export function standingNotice(runId: string, calls: readonly StandingCall[]): string {
  const lines = calls.map((c) => `- ${describeStandingCall(c)}`);
  return [
    `Note: an earlier attempt of this task (run ${runId}) failed after making these calls, which took`,
    'effect or may have. They stand: do not make any of them again unless the task truly needs a second',
    'one; an operator let this attempt start knowing of them.',
    ...lines,
  ].join('\n');
}

/** The standing calls an operator's `node.retry_allowed` recorded, if any. */
function allowedDespite(
  event: WorkflowEvent | undefined,
): { runId: string; calls: StandingCall[] } | undefined {
  const detail = event?.detail;
  if (detail === null || detail === undefined || typeof detail !== 'object' || Array.isArray(detail)) return;
  const { standingCalls, runId } = detail;
  if (!Array.isArray(standingCalls) || standingCalls.length === 0 || typeof runId !== 'string') return;
  return { runId, calls: standingCalls as unknown as StandingCall[] };
}

/** Which attempts of each node were started, from the events. */
function attemptsOf(facts: PlanFacts): Map<string, NodeAttempt[]> {
  const byNode = new Map<string, NodeAttempt[]>();
  for (const e of facts.events) {
    if (e.kind !== 'node.started' || e.node === null || e.attempt === null || e.runId === null) continue;
    const list = byNode.get(e.node) ?? [];
    list.push({ attempt: e.attempt, runId: e.runId, run: facts.runs.get(e.runId) });
    byNode.set(e.node, list);
  }
  for (const list of byNode.values()) list.sort((a, b) => a.attempt - b.attempt);
  return byNode;
}

const has = (facts: PlanFacts, kind: WorkflowEvent['kind'], node: string, attempt?: number): boolean =>
  facts.events.some(
    (e) => e.kind === kind && e.node === node && (attempt === undefined || e.attempt === attempt),
  );

function endedAt(facts: PlanFacts, node: string, attempt: number, run: RunRecord): number {
  const event = facts.events.find((e) => e.kind === 'node.ended' && e.node === node && e.attempt === attempt);
  return Date.parse(event?.at ?? run.updatedAt);
}

/** The wait before attempt `next` (2 or more): the node's backoff, doubled for each later attempt. */
export function backoffBefore(node: WorkflowNode, next: number): number {
  return Math.min(node.backoffMs * 2 ** Math.max(0, next - 2), 86_400_000);
}

function errorOf(run: RunRecord): ErrorInfo {
  if (run.status === 'cancelled')
    return { code: 'RUN_CANCELLED', message: run.statusReason ?? 'the run was cancelled' };
  return run.error ?? { code: 'RUN_FAILED', message: run.statusReason ?? 'the run failed' };
}

function threwInfo(what: string, cause: unknown): ErrorInfo {
  return {
    code: 'WORKFLOW_FUNCTION_FAILED',
    message: `${what} threw: ${cause instanceof Error ? cause.message : String(cause)}`,
  };
}

/** Decides the next move of a running workflow run. */
export function planWorkflow(facts: PlanFacts): WorkflowPlan {
  const { workflow } = facts;
  const attempts = attemptsOf(facts);
  const views = new Map<string, NodeView>();
  const results: Record<string, JsonValue> = {};
  const start: StartNode[] = [];
  const events: NewWorkflowEvent[] = [];
  let failure: { node: string; error: ErrorInfo; reason: string } | undefined;
  let pause: { node: string; reason: string } | undefined;
  let threw: ErrorInfo | undefined;
  let wakeInMs = facts.recheckMs ?? RECHECK_MS;
  const context = (): WorkflowContext => ({ input: facts.input, nodes: { ...results } });

  for (const node of workflow.nodes) {
    const tried = attempts.get(node.name) ?? [];
    const view = (
      state: NodeState,
      reason: string | null = null,
      standingCalls: readonly StandingCall[] = [],
    ): void => {
      views.set(node.name, {
        name: node.name,
        agent: node.agent,
        state,
        attempts: tried,
        reason,
        standingCalls,
      });
    };
    const needs = node.needs.map((n) => views.get(n)?.state);
    if (has(facts, 'node.skipped', node.name)) {
      view('skipped');
      continue;
    }
    if (needs.some((s) => s === 'failed' || s === 'blocked')) {
      view('blocked', 'a node it needs failed');
      continue;
    }
    if (needs.some((s) => s === 'skipped') && tried.length === 0) {
      events.push({
        kind: 'node.skipped',
        node: node.name,
        attempt: 0,
        reason: 'a node it needs was skipped',
      });
      view('skipped', 'a node it needs was skipped');
      continue;
    }
    if (needs.some((s) => s !== 'completed' && s !== 'skipped')) {
      view('waiting');
      continue;
    }
    const latest = tried.at(-1);
    if (latest === undefined) {
      if (threw !== undefined) {
        view('waiting');
        continue;
      }
      let runs = true;
      let input: unknown = facts.input;
      try {
        if (node.when !== undefined) runs = node.when(context()) === true;
        if (runs && node.input !== undefined) input = node.input(context());
      } catch (cause) {
        threw = threwInfo(
          `node "${node.name}"'s ${node.when === undefined ? 'input' : 'condition or input'}`,
          cause,
        );
        view('waiting');
        continue;
      }
      if (!runs) {
        events.push({ kind: 'node.skipped', node: node.name, attempt: 0, reason: 'its condition was false' });
        view('skipped', 'its condition was false');
        continue;
      }
      start.push({ node, attempt: 1, runId: nodeRunId(facts.workflowRunId, node.name, 1), input });
      view('running');
      continue;
    }
    const run = latest.run;
    if (run === undefined || !isFinalRunStatus(run.status)) {
      view('running', run?.statusReason ?? null);
      continue;
    }
    const ended: NewWorkflowEvent = {
      kind: 'node.ended',
      node: node.name,
      attempt: latest.attempt,
      runId: latest.runId,
      detail:
        run.status === 'completed'
          ? { status: run.status }
          : { status: run.status, error: { ...errorOf(run) } },
    };
    if (!has(facts, 'node.ended', node.name, latest.attempt)) events.push(ended);
    if (run.status === 'completed') {
      results[node.name] = run.result ?? null;
      view('completed');
      continue;
    }
    const error = errorOf(run);
    const why = `node "${node.name}"'s run ${latest.runId} ${run.status === 'cancelled' ? 'was cancelled' : 'failed'}: ${error.message}`;
    const standing = facts.standingCallsOf.get(latest.runId) ?? [];
    const next = latest.attempt + 1;
    const again = (notice?: string): void => {
      try {
        const input = node.input === undefined ? facts.input : node.input(context());
        const runId = nodeRunId(facts.workflowRunId, node.name, next);
        start.push({ node, attempt: next, runId, input, ...(notice === undefined ? {} : { notice }) });
        view('running');
      } catch (cause) {
        threw = threwInfo(`node "${node.name}"'s input`, cause);
        view('failed', threw.message);
      }
    };
    const allowed = facts.events.find(
      (e) => e.kind === 'node.retry_allowed' && e.node === node.name && e.attempt === next,
    );
    if (allowed !== undefined) {
      // An operator decided this node runs again, knowing what stands.
      const despite = allowedDespite(allowed);
      again(despite === undefined ? undefined : standingNotice(despite.runId, despite.calls));
      continue;
    }
    if (node.recoveryPolicy === 'retry' && run.status === 'failed' && next <= node.maxAttempts) {
      if (standing.length > 0) {
        // A fresh run has new keys: it would repeat what stands. Only a person may decide that.
        const reason =
          `${why}; it is not retried by itself, because calls of that run took effect or may have: ` +
          `${describeStandingCalls(standing)}. Waiting for an operator to retry the node knowingly, skip it, ` +
          'or fail the workflow';
        pause ??= { node: node.name, reason };
        view('failed', reason, standing);
        continue;
      }
      const dueMs = endedAt(facts, node.name, latest.attempt, run) + backoffBefore(node, next);
      if (dueMs > facts.nowMs) {
        view(
          'retrying',
          `${why}; attempt ${next} of ${node.maxAttempts} starts in ${dueMs - facts.nowMs} ms`,
        );
        wakeInMs = Math.min(wakeInMs, dueMs - facts.nowMs);
        continue;
      }
      again();
      continue;
    }
    if (node.recoveryPolicy === 'pause' && run.status === 'failed') {
      const stands =
        standing.length === 0 ? '' : `; calls of that run that stand: ${describeStandingCalls(standing)}`;
      const reason = `${why}${stands}; waiting for an operator to retry the node, skip it, or fail the workflow`;
      pause ??= { node: node.name, reason };
      view('failed', reason, standing);
      continue;
    }
    const tail =
      node.recoveryPolicy === 'retry' && run.status === 'failed'
        ? ` (attempt ${latest.attempt} of ${node.maxAttempts})`
        : '';
    failure ??= { node: node.name, error, reason: `${why}${tail}` };
    view('failed', `${why}${tail}`, standing);
  }

  const nodes = workflow.nodes.map((n) => views.get(n.name) as NodeView);
  const base = { nodes, events, result: null, error: null, wakeInMs };
  if (threw !== undefined) {
    return { ...base, start: [], status: 'failed', statusReason: threw.message, error: threw, threw };
  }
  if (failure !== undefined) {
    const error = { code: 'WORKFLOW_NODE_FAILED', message: failure.reason };
    return { ...base, start: [], status: 'failed', statusReason: failure.reason, error };
  }
  if (pause !== undefined && start.length === 0) {
    return { ...base, start: [], status: 'awaiting_operator', statusReason: pause.reason };
  }
  if (start.length === 0 && nodes.every((n) => n.state === 'completed' || n.state === 'skipped')) {
    let result: JsonValue;
    try {
      result =
        workflow.result === undefined
          ? { ...results }
          : (JSON.parse(JSON.stringify(workflow.result(context()) ?? null)) as JsonValue);
    } catch (cause) {
      const error = threwInfo("the workflow's result", cause);
      return { ...base, start: [], status: 'failed', statusReason: error.message, error };
    }
    return { ...base, start: [], status: 'completed', statusReason: null, result };
  }
  const waitingOn = nodes.filter((n) => n.state === 'running' || n.state === 'retrying').map((n) => n.name);
  const reason = start.length > 0 || waitingOn.length === 0 ? null : `waiting for ${waitingOn.join(', ')}`;
  return { ...base, start, status: 'running', statusReason: reason };
}
