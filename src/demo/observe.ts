import { setTimeout as sleep } from 'node:timers/promises';
import type { Page, Run, ToolExecution, ToolExecutionWithHistory } from '../api/client-types.js';
import type { DemoWorld } from './demo-world.js';
import type { CallStory, Heard, ScenarioReport } from './facts.js';
import { lastHeard } from './scripts.js';

/*
 * How the demo looks at what happened: the run and the ledger through the operator HTTP API, what the
 * model heard from the scripted model's own record of its prompts, and the billing service's count.
 */

export async function startRun(world: DemoWorld, agent: string, input: string): Promise<Run> {
  return world.parts.api.post<Run>('/v1/runs', { agent, input });
}

/** Polls the run over the API until it is in one of `statuses` (bounded). */
export async function runReaches(world: DemoWorld, runId: string, statuses: readonly string[]): Promise<Run> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const run = await world.parts.api.get<Run>(`/v1/runs/${runId}`);
    if (statuses.includes(run.status)) return run;
    if (Date.now() > deadline) {
      throw new Error(
        `run ${runId} did not reach ${statuses.join(' or ')} within 15 s (it is ${run.status})`,
      );
    }
    await sleep(20);
  }
}

/** Every call of the run in the ledger, oldest first (compensation records included). */
export async function callsOf(world: DemoWorld, runId: string): Promise<ToolExecution[]> {
  const page = await world.parts.api.get<Page<ToolExecution>>('/v1/tool-executions', {
    status: 'all',
    run_id: runId,
    limit: 50,
  });
  return page.items;
}

/** The tenant's unknown calls, as an operator's console lists them. */
export async function unknownKeys(world: DemoWorld): Promise<string[]> {
  const page = await world.parts.api.get<Page<ToolExecution>>('/v1/tool-executions', { limit: 200 });
  return page.items.map((r) => r.idempotency_key);
}

export async function story(world: DemoWorld, key: string): Promise<CallStory> {
  const { record, history } = await world.parts.api.get<ToolExecutionWithHistory>(
    `/v1/tool-executions/${encodeURIComponent(key)}`,
  );
  return {
    key,
    toolName: record.tool_name,
    status: record.status,
    attempt: record.attempt,
    history: history.map((e) => ({
      kind: e.kind,
      via: e.via,
      to: e.to,
      actor: e.actor.kind === 'reconcile' ? e.actor.id : `${e.actor.kind} ${e.actor.id}`,
      reason: e.reason,
    })),
  };
}

/** `kind:to:actor kind` for each event, for facts about a history. */
export function moves(call: CallStory): string[] {
  return call.history.map((e) => `${e.kind}:${e.to ?? '-'}:${e.actor.split(/[ :]/)[0] ?? ''}`);
}

/** What the agent's model heard last: the tool results of the step it was told about. */
export function heardBy(world: DemoWorld, agent: string): Heard[] {
  const model = world.parts.agents.get(agent)?.model;
  const prompt = model?.received.at(-1);
  if (prompt === undefined) return [];
  return lastHeard(prompt).map((h) => ({
    toolName: h.toolName,
    status: String(h.value.status),
    value: h.value,
  }));
}

/** The billing service's own count for these keys: credits applied, still standing, void requests. */
export function billingFor(world: DemoWorld, keys: readonly string[]): ScenarioReport['billing'] {
  const applied = keys.flatMap((k) => world.parts.billing.appliedFor(k));
  const voids = applied.reduce((n, c) => n + (world.parts.billing.voidRequests.get(c.id) ?? 0), 0);
  return { credits: applied.length, standing: applied.filter((c) => !c.voided).length, voids };
}

export function answerOf(run: Run): string {
  const result = run.result as { text?: unknown } | null;
  return typeof result?.text === 'string' ? result.text : '';
}
