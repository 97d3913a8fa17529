import type { JsonValue } from '../ledger/index.js';
import type { LoopStep } from '../store/index.js';

/*
 * A loop's recorded model responses (table loop_steps), read back as a conversation an operator can
 * follow: what the model said, what it reasoned, which tools it asked for under which call ids. The
 * AI SDK keeps a response as its content parts, OpenAI Agents JS as its output items; both are read
 * here with their shapes spelled out, without loading either package (both are optional peers).
 */

export type LoopFramework = 'ai-sdk' | 'openai-agents';

export type LoopPart =
  | { readonly type: 'text'; readonly text: string }
  | { readonly type: 'reasoning'; readonly text: string }
  | {
      readonly type: 'tool-call';
      readonly toolCallId: string;
      readonly toolName: string;
      /** The arguments as the model wrote them: JSON when they parse, else the text. */
      readonly input: JsonValue;
      /** Run by the provider itself (not through the ledger): no key of this run. */
      readonly providerExecuted: boolean;
    }
  | { readonly type: 'other'; readonly kind: string };

export interface LoopTokens {
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly totalTokens: number;
}

export interface LoopTurn {
  readonly step: number;
  readonly framework: LoopFramework;
  readonly modelId: string;
  readonly createdAt: string;
  readonly usage: LoopTokens | null;
  readonly parts: LoopPart[];
}

/** The modelId the OpenAI Agents JS wrapper records its steps under. */
const AGENTS_MODEL_ID = 'openai-agents';

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

export function frameworkOf(step: Pick<LoopStep, 'modelId' | 'response'>): LoopFramework {
  return step.modelId === AGENTS_MODEL_ID || (isObj(step.response) && Array.isArray(step.response.output))
    ? 'openai-agents'
    : 'ai-sdk';
}

/** One recorded response as the turn of a conversation. */
export function loopTurn(step: LoopStep): LoopTurn {
  const framework = frameworkOf(step);
  const response = isObj(step.response) ? step.response : {};
  return {
    step: step.step,
    framework,
    modelId: step.modelId,
    createdAt: step.createdAt,
    usage: tokensOf(step.usage),
    parts: framework === 'openai-agents' ? agentsParts(response.output) : aiSdkParts(response.content),
  };
}

/** The AI SDK's content parts (language model specification v3/v4). */
function aiSdkParts(content: unknown): LoopPart[] {
  if (!Array.isArray(content)) return [];
  return content.map((part): LoopPart => {
    if (!isObj(part)) return { type: 'other', kind: typeof part };
    const type = str(part.type) ?? 'unknown';
    if ((type === 'text' || type === 'reasoning') && typeof part.text === 'string') {
      return { type, text: part.text };
    }
    if (type === 'tool-call') {
      return {
        type: 'tool-call',
        toolCallId: str(part.toolCallId) ?? '',
        toolName: str(part.toolName) ?? '',
        input: argumentsOf(part.input),
        providerExecuted: part.providerExecuted === true,
      };
    }
    return { type: 'other', kind: type };
  });
}

/** OpenAI Agents JS output items (the Responses API's: message, function_call, reasoning, …). */
function agentsParts(output: unknown): LoopPart[] {
  if (!Array.isArray(output)) return [];
  return output.flatMap((item): LoopPart[] => {
    if (!isObj(item)) return [{ type: 'other', kind: typeof item }];
    const type = str(item.type) ?? 'unknown';
    if (type === 'message' && Array.isArray(item.content)) {
      return item.content.map((c): LoopPart => {
        const text = isObj(c) ? (str(c.text) ?? str(c.refusal)) : undefined;
        return text === undefined
          ? { type: 'other', kind: isObj(c) ? String(c.type) : 'content' }
          : { type: 'text', text };
      });
    }
    if (type === 'reasoning') {
      const texts = [item.content, item.rawContent]
        .flatMap((list): unknown[] => (Array.isArray(list) ? (list as unknown[]) : []))
        .flatMap((c) => (isObj(c) && typeof c.text === 'string' ? [c.text] : []));
      return [{ type: 'reasoning', text: texts.join('\n') }];
    }
    if (type === 'function_call') {
      return [
        {
          type: 'tool-call',
          toolCallId: str(item.callId) ?? '',
          toolName: str(item.name) ?? '',
          input: argumentsOf(item.arguments),
          providerExecuted: false,
        },
      ];
    }
    return [{ type: 'other', kind: type }];
  });
}

function argumentsOf(input: unknown): JsonValue {
  if (typeof input !== 'string') return (input ?? null) as JsonValue;
  try {
    return JSON.parse(input) as JsonValue;
  } catch {
    return input;
  }
}

/**
 * Token counts of either framework's usage: the AI SDK's v3 `{ inputTokens: { total }, outputTokens:
 * { total } }` or plain numbers, the Agents SDK's `{ inputTokens, outputTokens, totalTokens }`.
 */
export function tokensOf(usage: JsonValue | null): LoopTokens | null {
  if (!isObj(usage)) return null;
  const count = (v: unknown): number | undefined => num(v) ?? (isObj(v) ? num(v.total) : undefined);
  const input = count(usage.inputTokens);
  const output = count(usage.outputTokens);
  if (input === undefined && output === undefined) return null;
  return {
    inputTokens: input ?? 0,
    outputTokens: output ?? 0,
    totalTokens: num(usage.totalTokens) ?? (input ?? 0) + (output ?? 0),
  };
}
