import { randomFillSync } from 'node:crypto';
import type { ModelMessage } from 'ai';
import type { JsonValue } from '../ledger/index.js';
import type { ModelTurn } from '../models/index.js';
import type { HeardResult, PendingCall } from '../run-state/index.js';

/*
 * A run's conversation, stored in its checkpoint as AI SDK model messages (plain JSON). Tool calls
 * carry the ids the runtime minted, never the provider's, so every tool result answers the call it
 * belongs to and every key stays stable across replays.
 */

/** The messages this process built (the model's responses, the tool results): well-formed by construction. */
const builtHere = new WeakSet<object>();

/** Whether `message` was built here by `recordTurn` or `toolMessage` (not read from a checkpoint). */
export function isBuiltHere(message: unknown): boolean {
  return typeof message === 'object' && message !== null && builtHere.has(message);
}

function built<T extends object>(message: T): T {
  builtHere.add(message);
  return message;
}

/** The conversation a run starts with: its input as the user's message. */
export function initialMessages(input: JsonValue): JsonValue[] {
  const content = typeof input === 'string' ? input : JSON.stringify(input);
  return [{ role: 'user', content }];
}

/** Random bytes for tool call ids, drawn from the system's generator a few kilobytes at a time. */
const idBytes = Buffer.alloc(8 * 512);
let idOffset = idBytes.length;

/** Forgets the bytes drawn ahead, so the next id draws afresh (the simulator, after seeding). */
export function resetMintedIds(): void {
  idOffset = idBytes.length;
}

/** A fresh tool call id: providers repeat and omit theirs, so the runtime never uses them. */
export function mintToolCallId(): string {
  if (idOffset >= idBytes.length) {
    randomFillSync(idBytes);
    idOffset = 0;
  }
  idOffset += 8;
  return `call_${idBytes.toString('hex', idOffset - 8, idOffset)}`;
}

/** The model's response with minted ids, and the calls it asks for, ready for the checkpoint. */
export function recordTurn(turn: ModelTurn): { message: JsonValue; calls: PendingCall[] } {
  const calls: PendingCall[] = turn.toolCalls.map((call) => ({
    toolCallId: mintToolCallId(),
    toolName: call.toolName,
    input: jsonInput(call.input),
    ...(call.problem === undefined ? {} : { problem: call.problem }),
  }));
  const content: JsonValue[] = [];
  // Text and reasoning in the model's order, each with what its provider attached (sent back next call).
  for (const part of turn.parts) {
    content.push({
      type: part.type,
      text: part.text,
      ...(part.providerMetadata === undefined ? {} : { providerOptions: part.providerMetadata as JsonValue }),
    });
  }
  turn.toolCalls.forEach((modelCall, i) => {
    const call = calls[i]!;
    content.push({
      type: 'tool-call',
      toolCallId: call.toolCallId,
      toolName: call.toolName,
      input: call.input,
      ...(modelCall.providerMetadata === undefined
        ? {}
        : { providerOptions: modelCall.providerMetadata as JsonValue }),
    });
  });
  return { message: built({ role: 'assistant', content }), calls };
}

/** The tool results of one step, in the order the model made the calls. */
export function toolMessage(calls: readonly PendingCall[]): JsonValue {
  return built({
    role: 'tool',
    content: calls.map((call) => {
      if (call.heard === undefined) throw new Error(`call ${call.toolCallId} is not settled yet`);
      return {
        type: 'tool-result',
        toolCallId: call.toolCallId,
        toolName: call.toolName,
        output: { type: call.heard.type, value: call.heard.value },
      };
    }),
  });
}

/** A correction the runtime owes the model, in place of nothing it could otherwise hear. */
export interface Correction {
  readonly toolCallId: string;
  readonly toolName: string;
  readonly heard: HeardResult;
}

/**
 * The runtime's correction of tool results the model heard in earlier steps (a call told "did not
 * take effect" whose effect then landed), as a user message before its next call: a tool result
 * cannot be sent twice. `providerOptions.oncely.corrects` names the calls it corrects, so each is
 * corrected once; providers ignore options not under their name.
 */
export function correctionMessage(corrections: readonly Correction[]): JsonValue {
  const lines = corrections.map(
    (c) => `- tool call ${c.toolCallId} (${c.toolName}): ${JSON.stringify(c.heard.value)}`,
  );
  const text =
    'Correction from the runtime (not from the user): what you were told about these earlier tool calls ' +
    `no longer stands.\n${lines.join('\n')}`;
  return built({
    role: 'user',
    content: [{ type: 'text', text }],
    providerOptions: { oncely: { corrects: corrections.map((c) => c.toolCallId) } },
  });
}

/** The ids of the calls the corrections among `messages` already corrected. */
export function correctedIn(messages: readonly JsonValue[]): Set<string> {
  const ids = new Set<string>();
  for (const message of messages as {
    role?: string;
    providerOptions?: { oncely?: { corrects?: unknown } };
  }[]) {
    const corrects = message.role === 'user' ? message.providerOptions?.oncely?.corrects : undefined;
    if (Array.isArray(corrects)) for (const id of corrects) if (typeof id === 'string') ids.add(id);
  }
  return ids;
}

/** The calls `messages` told the model did not take effect, by id, with their tool's name. */
export function toldNotTaken(messages: readonly JsonValue[]): Map<string, string> {
  const told = new Map<string, string>();
  for (const message of messages as { role?: string; content?: unknown }[]) {
    if (message.role !== 'tool' || !Array.isArray(message.content)) continue;
    for (const part of message.content as {
      type?: string;
      toolCallId?: string;
      toolName?: string;
      output?: { value?: { status?: unknown } };
    }[]) {
      if (part.type !== 'tool-result' || part.output?.value?.status !== 'did_not_take_effect') continue;
      if (typeof part.toolCallId === 'string') told.set(part.toolCallId, String(part.toolName));
    }
  }
  return told;
}

export function asModelMessages(messages: readonly JsonValue[]): ModelMessage[] {
  return messages as unknown as ModelMessage[];
}

/** A model's input as JSON; anything else (a raw string it could not parse) is kept as text. */
function jsonInput(input: unknown): JsonValue {
  try {
    return JSON.parse(JSON.stringify(input ?? {})) as JsonValue;
  } catch {
    return String(input);
  }
}
