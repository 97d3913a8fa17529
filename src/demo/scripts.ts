import type { LanguageModelV3Prompt } from '@ai-sdk/provider';
import type { Script, ScriptToolCall } from '../models/index.js';

/** A tool result as the model received it. */
export interface HeardResultPart {
  readonly toolName: string;
  readonly toolCallId: string;
  readonly type: string;
  readonly value: Record<string, unknown>;
}

/** The tool results of the last tool message in a prompt: what the model heard last. */
export function lastHeard(prompt: LanguageModelV3Prompt): HeardResultPart[] {
  const message = prompt.findLast((m) => m.role === 'tool');
  if (message === undefined) return [];
  return message.content.flatMap((part) =>
    part.type === 'tool-result'
      ? [
          {
            toolName: part.toolName,
            toolCallId: part.toolCallId,
            type: part.output.type,
            value: 'value' in part.output ? (part.output.value as Record<string, unknown>) : {},
          },
        ]
      : [],
  );
}

/**
 * A scripted agent for one demo scenario: first it asks for `calls`; then it answers from what it
 * heard, so its final words follow the truth the runtime told it.
 */
export function demoScript(calls: readonly ScriptToolCall[]): Script {
  return (prompt, turn) => {
    if (turn === 0) return { text: 'On it.', toolCalls: calls };
    return { text: lastHeard(prompt).map(sentence).join(' ') };
  };
}

function sentence(heard: HeardResultPart): string {
  const v = heard.value;
  const result = (v.result ?? {}) as Record<string, unknown>;
  switch (v.status) {
    case 'completed':
      return heard.toolName === 'issue_credit'
        ? `Credited ${cents(result.amountCents)} to ${String(result.accountId)} (credit ${String(result.creditId)}).`
        : `${heard.toolName} is done.`;
    case 'did_not_take_effect':
      return `The ${heard.toolName} call did not go through, so nothing changed (${String(v.reason)}).`;
    case 'compensated':
      return `The credit ${String(result.creditId)} was reversed by an operator (${String(v.reason)}).`;
    case 'rejected':
      return `An operator stopped ${heard.toolName} (${String(v.reason)}).`;
    case 'not_attempted':
      return `I could not run ${heard.toolName}: ${String(v.error)}. Nothing was sent.`;
    default:
      return `${heard.toolName}: ${String(v.status)}.`;
  }
}

function cents(value: unknown): string {
  return typeof value === 'number' ? `$${(value / 100).toFixed(2)}` : 'the amount';
}
