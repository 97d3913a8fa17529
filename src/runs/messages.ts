import { randomFillSync } from 'node:crypto';
import type { ModelMessage } from 'ai';
import type { JsonValue } from '../ledger/index.js';
import type { ModelTurn } from '../models/index.js';
import type { PendingCall } from '../run-state/index.js';

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
