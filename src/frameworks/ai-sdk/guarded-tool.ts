import { jsonSchema, tool as aiTool, type Tool as AiTool } from 'ai';
import type { ToolCallOutcome } from '../../calls/index.js';
import type { JsonValue } from '../../ledger/index.js';
import type { HeardResult } from '../../run-state/index.js';
import { heardOf as heardOfOutcome, heardOfRecorded, toldAsResult } from '../../runs/heard.js';
import type { LedgerStore } from '../../store/index.js';
import type { Tool } from '../../tools/index.js';

/**
 * What the model hears about a guarded call's outcome, as a tool result: the recorded result of a
 * call that took effect (the same JSON on the first run and on every replay, so a restarted loop
 * sends the model the conversation it sent before), or the runtime's plain words for a call that
 * did not take effect, was refused before sending, or was compensated, for one an operator settled
 * `completed` (the reference and their reason; `reason` is theirs, when the caller read it), or one
 * whose effect landed after it was settled `failed`. `undefined` while the outcome
 * is unknown: then the model is told nothing, never "failed".
 */
export type Heard =
  | { readonly kind: 'result'; readonly value: JsonValue | null }
  | { readonly kind: 'told'; readonly type: 'json' | 'error-json'; readonly value: JsonValue };

export function heardOf(outcome: ToolCallOutcome, reason: string | null = null): Heard | undefined {
  if (outcome.status === 'completed' && toldAsResult(outcome.record)) {
    return { kind: 'result', value: outcome.record.result };
  }
  return toHeard(heardOfOutcome(outcome, reason));
}

/**
 * `heardOf`, with the words that need the record's history read first (an operator's reason, what
 * landed on a call settled `failed`): what the adapters tell the model.
 */
export async function heardOfRecordedCall(
  store: Pick<LedgerStore, 'history'>,
  outcome: ToolCallOutcome,
): Promise<Heard | undefined> {
  if (outcome.status === 'completed' && toldAsResult(outcome.record)) {
    return { kind: 'result', value: outcome.record.result };
  }
  return toHeard(await heardOfRecorded(store, outcome));
}

function toHeard(heard: HeardResult | undefined): Heard | undefined {
  return heard === undefined ? undefined : { kind: 'told', type: heard.type, value: heard.value };
}

interface GuardedExecution {
  readonly execute: (args: unknown, toolCallId: string, signal: AbortSignal | undefined) => Promise<unknown>;
  /** What the model is told instead of the result, for a call that did not take effect. */
  readonly heard: (toolCallId: string) => { type: 'json' | 'error-json'; value: JsonValue } | undefined;
}

/** An oncely tool as an AI SDK tool whose every execution goes through `guarded`. */
export function aiSdkTool(tool: Tool, guarded: GuardedExecution): AiTool<unknown, unknown> {
  return aiTool({
    description: tool.description,
    inputSchema: jsonSchema<unknown>(tool.jsonSchema),
    ...(tool.strict ? { strict: true } : {}),
    execute: (args, options) => guarded.execute(args, options.toolCallId, options.abortSignal),
    toModelOutput: ({ toolCallId, output }) =>
      guarded.heard(toolCallId) ?? { type: 'json', value: (output ?? null) as JsonValue },
  });
}
