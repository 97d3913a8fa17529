import { OncelyError } from '../errors/index.js';
import type { JsonValue } from '../ledger/index.js';
import { toolInputOf, type ToolInput, type ToolInputSchema } from '../tools/tool-input.js';

/*
 * A workflow: named nodes, each an agent run, joined by what each node needs (sequence, fan-out,
 * fan-in) and an optional condition on earlier results. Its definition is checked when it is made;
 * whether its `retry` nodes can retry is checked against the agents when a runtime or a configuration
 * loads it (`recoveryProblems`).
 */

/** What a node does when its run fails. */
export const RECOVERY_POLICIES = ['fail', 'pause', 'retry'] as const;
export type RecoveryPolicy = (typeof RECOVERY_POLICIES)[number];

/** What a node's input, condition and the workflow's result are built from. */
export interface WorkflowContext {
  /** The workflow's input, as its schema let it through. */
  readonly input: JsonValue;
  /** The result of each node that completed (a run's result: `{ text }`), by node name. */
  readonly nodes: Readonly<Record<string, JsonValue>>;
}

export interface WorkflowNodeDefinition {
  /** The agent whose run this node is (by name; the runtime or configuration has it). */
  readonly agent: string;
  /** The nodes that must have completed (or been skipped) first; none: it starts at once. */
  readonly needs?: readonly string[];
  /** The run's input (its user message); default the workflow's input. */
  readonly input?: (context: WorkflowContext) => unknown;
  /** Runs the node only when this says true; else the node is skipped, and so are nodes needing only it. */
  readonly when?: (context: WorkflowContext) => boolean;
  /** `fail` (default): the workflow fails; `pause`: it waits for an operator; `retry`: a fresh run. */
  readonly recoveryPolicy?: RecoveryPolicy;
  /** Runs of the node at most, the first included (retry only; default 3, at most 20). */
  readonly maxAttempts?: number;
  /** The wait before the second run, doubled for each later one (retry only; default 1000 ms). */
  readonly backoffMs?: number;
}

export interface WorkflowDefinition {
  /** 1-64 of `A-Z a-z 0-9 _ -`. */
  readonly name: string;
  /** The input's schema (zod, Standard Schema, or JSON Schema); none: any JSON. */
  readonly input?: ToolInputSchema;
  /** The nodes by name (1-24 of `A-Z a-z 0-9 _ -`). */
  readonly nodes: Readonly<Record<string, WorkflowNodeDefinition>>;
  /** The workflow's result; default each completed node's result by name. */
  readonly result?: (context: WorkflowContext) => unknown;
  /**
   * Where a configuration file defined it (for the load-time error), e.g. `workflows[0]`; the
   * runtime names it by its name otherwise.
   */
  readonly definedAt?: string;
}

export interface WorkflowNode {
  readonly name: string;
  readonly agent: string;
  readonly needs: readonly string[];
  readonly input: ((context: WorkflowContext) => unknown) | undefined;
  readonly when: ((context: WorkflowContext) => boolean) | undefined;
  readonly recoveryPolicy: RecoveryPolicy;
  readonly maxAttempts: number;
  readonly backoffMs: number;
}

export interface Workflow {
  readonly name: string;
  readonly input: ToolInput | undefined;
  /** In an order where every node comes after the nodes it needs. */
  readonly nodes: readonly WorkflowNode[];
  readonly result: ((context: WorkflowContext) => unknown) | undefined;
  readonly definedAt: string | undefined;
}

export const WORKFLOW_NAME = /^[A-Za-z0-9_-]{1,64}$/;
/** No "." in a node name: a node's run id is `<workflow_run_id>.<node>.<attempt>`, read from the right. */
export const NODE_NAME = /^[A-Za-z0-9_-]{1,24}$/;
/** Workflow run ids leave room in a run id (128) for `.<node>.<attempt>`. */
export const WORKFLOW_RUN_ID = /^[A-Za-z0-9_.-]{1,96}$/;
export const MAX_NODE_ATTEMPTS = 20;
export const DEFAULT_NODE_ATTEMPTS = 3;
export const DEFAULT_NODE_BACKOFF_MS = 1_000;
const MAX_NODES = 64;

/** The run id of a node's attempt: one per attempt, whoever starts it. */
export function nodeRunId(workflowRunId: string, node: string, attempt: number): string {
  return `${workflowRunId}.${node}.${attempt}`;
}

/** The workflow run a run id names as one of its node runs (read from the right), if it has that form. */
export function workflowRunIdOf(runId: string): string | undefined {
  const match = /^(.+)\.[A-Za-z0-9_-]{1,24}\.\d{1,2}$/.exec(runId);
  return match?.[1] !== undefined && WORKFLOW_RUN_ID.test(match[1]) ? match[1] : undefined;
}

/**
 * Defines a workflow. A bad definition (an unknown node in `needs`, a cycle, a bad name, retry
 * settings on a node that does not retry) throws `WORKFLOW_DEFINITION_INVALID` naming each problem.
 *
 * @example
 * const refunds = defineWorkflow({
 *   name: 'refund-review',
 *   nodes: {
 *     lookup: { agent: 'order-lookup', recoveryPolicy: 'retry' },
 *     refund: { agent: 'refunder', needs: ['lookup'], input: ({ nodes }) => nodes.lookup },
 *   },
 * });
 */
export function defineWorkflow(definition: WorkflowDefinition): Workflow {
  const problems: string[] = [];
  const name = definition.name;
  const shown = definition.definedAt ?? `workflow "${String(name)}"`;
  if (typeof name !== 'string' || !WORKFLOW_NAME.test(name))
    problems.push(`name ${JSON.stringify(name)}: use 1-64 characters of A-Z a-z 0-9 _ -`);
  let input: ToolInput | undefined;
  if (definition.input !== undefined) {
    try {
      input = toolInputOf(definition.input);
    } catch (cause) {
      problems.push(`input: ${cause instanceof Error ? cause.message : String(cause)}`);
    }
  }
  if (definition.result !== undefined && typeof definition.result !== 'function')
    problems.push('result: must be a function ({ input, nodes }) => value');
  const entries = Object.entries(definition.nodes ?? {});
  if (entries.length === 0) problems.push('nodes: a workflow needs at least one node');
  if (entries.length > MAX_NODES) problems.push(`nodes: at most ${MAX_NODES}; there are ${entries.length}`);
  const nodes = entries.map(([nodeName, node]) => nodeOf(nodeName, node, problems));
  const known = new Set(nodes.map((n) => n.name));
  for (const node of nodes) {
    for (const need of node.needs) {
      if (need === node.name) problems.push(`nodes.${node.name}.needs: a node cannot need itself`);
      else if (!known.has(need))
        problems.push(
          `nodes.${node.name}.needs: there is no node "${need}"; the nodes are: ${[...known].join(', ')}`,
        );
    }
  }
  const ordered = problems.length === 0 ? topological(nodes, problems) : nodes;
  if (problems.length > 0) {
    throw new OncelyError('WORKFLOW_DEFINITION_INVALID', `${shown} is not valid: ${problems.join('; ')}`, {
      details: { workflow: String(name), problems },
    });
  }
  return Object.freeze({
    name,
    input,
    nodes: Object.freeze(ordered),
    result: definition.result,
    definedAt: definition.definedAt,
  });
}

function nodeOf(name: string, node: WorkflowNodeDefinition, problems: string[]): WorkflowNode {
  const at = `nodes.${name}`;
  if (!NODE_NAME.test(name)) problems.push(`${at}: a node name is 1-24 characters of A-Z a-z 0-9 _ -`);
  if (typeof node?.agent !== 'string' || node.agent === '') problems.push(`${at}.agent: name an agent`);
  const needs = node?.needs ?? [];
  if (!Array.isArray(needs) || needs.some((n) => typeof n !== 'string'))
    problems.push(`${at}.needs: a list of node names`);
  else if (new Set(needs).size !== needs.length) problems.push(`${at}.needs: a node is named twice`);
  for (const fn of ['input', 'when'] as const) {
    if (node?.[fn] !== undefined && typeof node[fn] !== 'function')
      problems.push(`${at}.${fn}: must be a function ({ input, nodes }) => value`);
  }
  const policy = node?.recoveryPolicy ?? 'fail';
  if (!RECOVERY_POLICIES.includes(policy))
    problems.push(
      `${at}.recoveryPolicy: one of ${RECOVERY_POLICIES.join(', ')}; got ${JSON.stringify(policy)}`,
    );
  const retries = policy === 'retry';
  if (!retries && (node?.maxAttempts !== undefined || node?.backoffMs !== undefined))
    problems.push(`${at}: maxAttempts and backoffMs are for recoveryPolicy retry (this node's is ${policy})`);
  const maxAttempts = node?.maxAttempts ?? (retries ? DEFAULT_NODE_ATTEMPTS : 1);
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > MAX_NODE_ATTEMPTS)
    problems.push(`${at}.maxAttempts: a whole number from 1 to ${MAX_NODE_ATTEMPTS}`);
  const backoffMs = node?.backoffMs ?? DEFAULT_NODE_BACKOFF_MS;
  if (!Number.isInteger(backoffMs) || backoffMs < 0 || backoffMs > 86_400_000)
    problems.push(`${at}.backoffMs: whole milliseconds from 0 to 86400000`);
  return Object.freeze({
    name,
    agent: node?.agent,
    needs: Object.freeze(Array.isArray(needs) ? [...(needs as readonly string[])] : []),
    input: node?.input,
    when: node?.when,
    recoveryPolicy: policy,
    maxAttempts,
    backoffMs,
  });
}

/** The nodes, each after those it needs (in definition order otherwise); a cycle is a problem. */
function topological(nodes: readonly WorkflowNode[], problems: string[]): WorkflowNode[] {
  const ordered: WorkflowNode[] = [];
  const placed = new Set<string>();
  let left = [...nodes];
  while (left.length > 0) {
    const ready = left.filter((n) => n.needs.every((need) => placed.has(need)));
    if (ready.length === 0) {
      problems.push(`nodes: ${left.map((n) => n.name).join(', ')} need each other in a cycle`);
      return ordered;
    }
    for (const n of ready) {
      ordered.push(n);
      placed.add(n.name);
    }
    left = left.filter((n) => !placed.has(n.name));
  }
  return ordered;
}

/** A tool as far as the retry check needs it. */
interface CheckedTool {
  readonly name: string;
  readonly effect: { readonly kind: string };
  readonly reconcile?: unknown;
}

/**
 * Why the workflow's `retry` nodes cannot retry as declared, if they cannot. A retry starts a fresh
 * run (new keys) by itself only when every non-read call of the failed run is known not to have
 * taken effect; any other outcome stops the node for an operator. A call of a tool with no reconcile
 * hook that ends unknown can be settled only by a person, so a node that can make one may not
 * declare `retry` (use `pause`). A hook never makes a retry repeat a call that took effect: it only
 * settles unknown ones. One sentence per such node, naming the workflow, the node and each tool; an
 * agent that is not there is named too. Empty: none.
 */
export function recoveryProblems(
  workflow: Workflow,
  agents: ReadonlyMap<string, { readonly tools: readonly CheckedTool[] }>,
): string[] {
  const problems: string[] = [];
  const shown =
    workflow.definedAt === undefined
      ? `workflow "${workflow.name}"`
      : `workflow "${workflow.name}" (${workflow.definedAt})`;
  for (const node of workflow.nodes) {
    const agent = agents.get(node.agent);
    if (agent === undefined) {
      const names = [...agents.keys()];
      problems.push(
        `${shown}, node "${node.name}": there is no agent "${node.agent}"; the agents are: ${names.join(', ') || '(none)'}`,
      );
      continue;
    }
    if (node.recoveryPolicy !== 'retry') continue;
    const unsafe = agent.tools.filter((t) => t.effect.kind !== 'read' && typeof t.reconcile !== 'function');
    if (unsafe.length === 0) continue;
    const tools = unsafe.map((t) => `"${t.name}" (${t.effect.kind}(), no reconcile hook)`).join(', ');
    problems.push(
      `${shown}, node "${node.name}": recovery_policy retry starts a fresh run of agent "${node.agent}" ` +
        'with new keys, and only when every non-read call of the failed run is known not to have taken ' +
        `effect; a call of ${tools} that ends unknown can be settled only by an operator, so retry is ` +
        'allowed only when every tool of the node is a read() or has a reconcile hook. Use recovery_policy ' +
        'pause (an operator decides) or fail, or give the tool a reconcile hook',
    );
  }
  return problems;
}
