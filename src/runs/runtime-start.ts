import { randomBytes } from 'node:crypto';
import type { Agent } from '../agents/index.js';
import { OncelyError } from '../errors/index.js';
import { assertTenantId, canonicalJson, isValidId, type JsonValue } from '../ledger/index.js';
import type { RunRecord } from '../run-state/index.js';
import type { CreateRunRequest, Store } from '../store/index.js';
import { jsonInput } from './conversation.js';
import { initialMessages } from './messages.js';
import { agentNamed } from './runtime-options.js';

export interface StartRunRequest {
  readonly tenantId: string;
  readonly agent: string;
  /** The user's message: a string, or any JSON (sent to the model as JSON text). */
  readonly input: unknown;
  /** A client-chosen id makes starting idempotent; default a fresh `run_…`. */
  readonly runId?: string;
  /**
   * Tokens the run may spend in all its turns (a positive integer), or null for no limit; default
   * the agent's `tokenBudget`.
   */
  readonly tokenBudget?: number | null;
}

/**
 * What creating a run writes, checked (tenant, agent, run id, input, budget) but not written
 * (`Runtime.newRun`).
 */
export function newRunRequest(
  agents: ReadonlyMap<string, Agent>,
  request: StartRunRequest & { runId: string },
): CreateRunRequest {
  assertTenantId(request.tenantId);
  const agent = agentNamed(agents, request.agent);
  if (!isValidId(request.runId)) {
    throw new OncelyError(
      'RUN_INPUT_INVALID',
      `run id ${JSON.stringify(request.runId)} is not valid; use 1-128 of A-Z a-z 0-9 _ . -`,
    );
  }
  const input = runInput(request.input);
  return {
    tenantId: request.tenantId,
    runId: request.runId,
    agent: request.agent,
    input,
    checkpoint: { messages: initialMessages(input), step: 0, pending: null },
    tokenBudget: runTokenBudget(request.tokenBudget, agent),
  };
}

/**
 * Creates a run once per run id (`Runtime.startRun`; claimed by `claim` when given): the same id
 * again with the same agent and input answers the run that stands, with another is `RUN_CONFLICT`.
 */
export async function createRun(
  store: Store,
  agents: ReadonlyMap<string, Agent>,
  request: StartRunRequest,
  claim: CreateRunRequest['claim'],
): Promise<{ created: boolean; run: RunRecord }> {
  assertTenantId(request.tenantId);
  agentNamed(agents, request.agent);
  const runId = request.runId ?? `run_${randomBytes(8).toString('hex')}`;
  if (!isValidId(runId)) {
    throw new OncelyError(
      'RUN_INPUT_INVALID',
      `run id ${JSON.stringify(runId)} is not valid; use 1-128 of A-Z a-z 0-9 _ . -`,
    );
  }
  const input = runInput(request.input);
  const tokenBudget = runTokenBudget(request.tokenBudget, agentNamed(agents, request.agent));
  const created = await store.runs.create({
    tenantId: request.tenantId,
    runId,
    agent: request.agent,
    input,
    checkpoint: { messages: initialMessages(input), step: 0, pending: null },
    tokenBudget,
    ...(claim === undefined ? {} : { claim }),
  });
  const { run } = created;
  if (
    !created.created &&
    (run.agent !== request.agent || canonicalJson(run.input) !== canonicalJson(input))
  ) {
    throw new OncelyError(
      'RUN_CONFLICT',
      `run ${runId} already exists with another agent or input; a run id names one run, so nothing was started`,
      { details: { runId, agent: run.agent } },
    );
  }
  return created;
}

function runInput(input: unknown): JsonValue {
  if (input === undefined)
    throw new OncelyError('RUN_INPUT_INVALID', 'a run needs an input: the user message');
  return jsonInput(input, 'run input');
}

/** A run's token budget: the request's (null: none), else the agent's. */
function runTokenBudget(budget: number | null | undefined, agent: Agent): number | null {
  if (budget === undefined) return agent.tokenBudget;
  if (budget === null) return null;
  if (!Number.isSafeInteger(budget) || budget < 1) {
    throw new OncelyError(
      'RUN_INPUT_INVALID',
      `a token budget is a positive whole number of tokens, or null for none; got ${JSON.stringify(budget)}`,
    );
  }
  return budget;
}
