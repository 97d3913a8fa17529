import { z } from 'zod/v4';
import { OncelyError, isOncelyError } from '../errors/index.js';
import { toJsonValue, type JsonValue } from '../ledger/index.js';
import { aiRuntime } from '../models/ai-runtime.js';

/*
 * A run's conversation as its users see it: the user messages sent to it (text, JSON, files), read
 * back as the AI SDK's model messages (as stored) or as UI messages (as a chat UI renders them).
 */

/** How many parts one user message may hold. */
export const MAX_MESSAGE_PARTS = 64;

/**
 * One part of a user message as a client sends it: the AI SDK's user content parts (`text`, `image`,
 * `file` with a URL or base64 data and its media type), and `json` for structured content, which the
 * model reads as its JSON text.
 */
const partSchema = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('text'), text: z.string().min(1) }),
  z.strictObject({ type: z.literal('json'), value: z.unknown() }),
  z.strictObject({
    type: z.literal('image'),
    image: z.string().min(1),
    mediaType: z.string().min(1).optional(),
  }),
  z.strictObject({
    type: z.literal('file'),
    data: z.string().min(1),
    mediaType: z.string().min(1),
    filename: z.string().min(1).optional(),
  }),
]);

/** A user message's content: text, or parts. */
export const userContentSchema = z.union([
  z.string().min(1, 'a message needs some text'),
  z.array(partSchema).min(1, 'a message needs at least one part').max(MAX_MESSAGE_PARTS),
]);

/** What a client may send as a user message: text, or parts. */
export type UserContent = z.input<typeof userContentSchema>;

/**
 * The user message `content` makes, as the conversation stores it (an AI SDK `ModelMessage` of role
 * `user`), checked against the AI SDK's own schema. `RUN_INPUT_INVALID` says what is wrong.
 */
export async function userMessage(content: unknown): Promise<JsonValue> {
  const parsed = userContentSchema.safeParse(content);
  if (!parsed.success) {
    const problems = parsed.error.issues.map(
      (i) => `${i.path.length > 0 ? `${i.path.join('.')}: ` : ''}${i.message}`,
    );
    throw new OncelyError(
      'RUN_INPUT_INVALID',
      `a message is text or a list of parts (text, json, image, file); ${problems.join('; ')}`,
    );
  }
  const value = parsed.data;
  const message: JsonValue = {
    role: 'user',
    content:
      typeof value === 'string'
        ? value
        : value.map((part): JsonValue => {
            if (part.type === 'json') {
              return { type: 'text', text: JSON.stringify(jsonInput(part.value ?? null, 'a json part')) };
            }
            return part;
          }),
  };
  const checked = await (await aiRuntime()).ai.modelMessageSchema.safeParseAsync(message);
  if (!checked.success) {
    throw new OncelyError(
      'RUN_INPUT_INVALID',
      `the message is not one the AI SDK takes: ${checked.error.issues.map((i) => i.message).join('; ')}`,
    );
  }
  return message;
}

/**
 * A value sent as input (a run's input, a `json` part) as JSON, or `RUN_INPUT_INVALID` saying what
 * JSON cannot carry, and where.
 */
export function jsonInput(value: unknown, what: string): JsonValue {
  try {
    return toJsonValue(value);
  } catch (error) {
    if (!isOncelyError(error)) throw error;
    throw new OncelyError('RUN_INPUT_INVALID', error.message.replace('arguments', what), { cause: error });
  }
}

/** A part of a UI message (the AI SDK's `UIMessagePart`, in the shapes oncely writes). */
export type UiPart =
  | { readonly type: 'text' | 'reasoning'; readonly text: string; readonly state: 'done' }
  | { readonly type: 'file'; readonly mediaType: string; readonly url: string; readonly filename?: string }
  | { readonly type: 'step-start' }
  | {
      readonly type: `tool-${string}`;
      readonly toolCallId: string;
      readonly state: 'input-available' | 'output-available' | 'output-error';
      readonly input: JsonValue;
      readonly output?: JsonValue;
      readonly errorText?: string;
    };

/** A UI message (the AI SDK's `UIMessage`): what `useChat` and its kin render. */
export interface UiMessage {
  readonly id: string;
  readonly role: 'user' | 'assistant';
  readonly parts: UiPart[];
}

type Part = Record<string, unknown>;

const text = (value: unknown): string => (typeof value === 'string' ? value : '');

/** A file's URL: a URL as given, base64 data as a data URL. */
function fileUrl(data: unknown, mediaType: string): string {
  const s = text(data);
  return /^[a-z][a-z0-9+.-]*:/i.test(s) ? s : `data:${mediaType};base64,${s}`;
}

function userParts(content: unknown): UiPart[] {
  if (typeof content === 'string') return [{ type: 'text', text: content, state: 'done' }];
  if (!Array.isArray(content)) return [];
  return (content as Part[]).flatMap((part): UiPart[] => {
    switch (part.type) {
      case 'text':
        return [{ type: 'text', text: text(part.text), state: 'done' }];
      case 'image': {
        const mediaType = text(part.mediaType) || 'image/*';
        return [{ type: 'file', mediaType, url: fileUrl(part.image, mediaType) }];
      }
      case 'file': {
        const mediaType = text(part.mediaType) || 'application/octet-stream';
        const filename = text(part.filename);
        return [
          { type: 'file', mediaType, url: fileUrl(part.data, mediaType), ...(filename ? { filename } : {}) },
        ];
      }
      default:
        return [];
    }
  });
}

/**
 * A run's conversation as UI messages: each user message one message; the assistant's responses
 * and the tool results of one turn one assistant message, a `step-start` before each step, each
 * call a `tool-<name>` part with its input and, once settled, what the model heard (`output`, or
 * `errorText` for a call that did not take effect). Ids are `<run_id>:<index of the message>`.
 */
export function uiMessages(runId: string, messages: readonly JsonValue[]): UiMessage[] {
  const out: { id: string; role: 'user' | 'assistant'; parts: UiPart[] }[] = [];
  const calls = new Map<string, { message: UiPart[]; index: number }>();
  messages.forEach((raw, index) => {
    const message = raw as Part;
    if (message.role === 'user') {
      out.push({ id: `${runId}:${index}`, role: 'user', parts: userParts(message.content) });
      return;
    }
    if (message.role === 'assistant') {
      let current = out.at(-1);
      if (current?.role !== 'assistant') {
        current = { id: `${runId}:${index}`, role: 'assistant', parts: [] };
        out.push(current);
      }
      const parts = current.parts;
      parts.push({ type: 'step-start' });
      const content =
        typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : message.content;
      for (const part of Array.isArray(content) ? (content as Part[]) : []) {
        if (part.type === 'text' || part.type === 'reasoning') {
          parts.push({ type: part.type, text: text(part.text), state: 'done' });
        } else if (part.type === 'tool-call') {
          const toolCallId = text(part.toolCallId);
          calls.set(toolCallId, { message: parts, index: parts.length });
          parts.push({
            type: `tool-${text(part.toolName)}`,
            toolCallId,
            state: 'input-available',
            input: (part.input ?? {}) as JsonValue,
          });
        }
      }
      return;
    }
    if (message.role === 'tool' && Array.isArray(message.content)) {
      for (const result of message.content as Part[]) {
        const at = calls.get(text(result.toolCallId));
        const call = at?.message[at.index];
        if (at === undefined || call === undefined || !('toolCallId' in call)) continue;
        const output = (result.output ?? {}) as { type?: string; value?: JsonValue };
        at.message[at.index] =
          output.type === 'error-json' || output.type === 'error-text'
            ? {
                ...call,
                state: 'output-error',
                errorText: typeof output.value === 'string' ? output.value : JSON.stringify(output.value),
              }
            : { ...call, state: 'output-available', output: output.value ?? null };
      }
    }
  });
  return out;
}
