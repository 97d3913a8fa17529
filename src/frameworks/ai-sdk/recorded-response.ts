import type {
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3FinishReason,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
  LanguageModelV3Usage,
} from '@ai-sdk/provider';
import { createHash } from 'node:crypto';
import { canonicalJson, type JsonValue } from '../../ledger/index.js';
import { mintToolCallId } from '../../runs/messages.js';

/*
 * A model's response as the store keeps it: plain JSON (binary file data as base64), the tool calls
 * the application will run carrying ids oncely minted, never the provider's. Replaying it gives the
 * AI SDK the same response, so every call keeps its key.
 */

export interface RecordedResponse {
  readonly content: LanguageModelV3Content[];
  readonly finishReason: LanguageModelV3FinishReason;
  readonly usage: LanguageModelV3Usage;
  readonly providerMetadata?: LanguageModelV3GenerateResult['providerMetadata'];
  readonly response?: { readonly id?: string; readonly modelId?: string; readonly timestamp?: string };
}

/** Ids of the calls the application runs, provider's → minted; provider-executed calls keep theirs. */
export class IdMinter {
  readonly #minted = new Map<string, string>();

  /** The minted id standing for the provider's id (one is minted the first time it is seen). */
  idFor(providerId: string): string {
    let id = this.#minted.get(providerId);
    if (id === undefined) {
      id = mintToolCallId();
      this.#minted.set(providerId, id);
    }
    return id;
  }

  /** A content part with the application's tool call ids replaced by minted ones. */
  part<P extends LanguageModelV3Content | LanguageModelV3StreamPart>(
    part: P,
    executedByProvider: ReadonlySet<string>,
  ): P {
    switch (part.type) {
      case 'tool-call':
        return part.providerExecuted === true ? part : { ...part, toolCallId: this.idFor(part.toolCallId) };
      case 'tool-approval-request':
        return executedByProvider.has(part.toolCallId)
          ? part
          : { ...part, toolCallId: this.idFor(part.toolCallId) };
      case 'tool-input-start':
        return part.providerExecuted === true ? part : { ...part, id: this.idFor(part.id) };
      case 'tool-input-delta':
      case 'tool-input-end':
        return this.#minted.has(part.id) ? { ...part, id: this.idFor(part.id) } : part;
      default:
        return part;
    }
  }
}

/** A generate result's content with minted ids for every call the application will run. */
export function mintedContent(content: readonly LanguageModelV3Content[]): LanguageModelV3Content[] {
  const byProvider = new Set(
    content.flatMap((p) => (p.type === 'tool-call' && p.providerExecuted === true ? [p.toolCallId] : [])),
  );
  const minter = new IdMinter();
  return content.map((p) => minter.part(p, byProvider));
}

/** The response as JSON for the store. */
export function toRecorded(
  result: Pick<
    LanguageModelV3GenerateResult,
    'content' | 'finishReason' | 'usage' | 'providerMetadata' | 'response'
  >,
): RecordedResponse {
  const timestamp = result.response?.timestamp;
  return plainJson({
    content: result.content.map(plainPart),
    finishReason: result.finishReason,
    usage: result.usage,
    ...(result.providerMetadata === undefined ? {} : { providerMetadata: result.providerMetadata }),
    response: {
      ...(result.response?.id === undefined ? {} : { id: result.response.id }),
      ...(result.response?.modelId === undefined ? {} : { modelId: result.response.modelId }),
      ...(timestamp === undefined ? {} : { timestamp: timestamp.toISOString() }),
    },
  }) as unknown as RecordedResponse;
}

/** The recorded response as the AI SDK takes it from a model's `doGenerate`. */
export function toGenerateResult(recorded: RecordedResponse): LanguageModelV3GenerateResult {
  const { timestamp, ...response } = recorded.response ?? {};
  return {
    content: recorded.content.map(livePart),
    finishReason: recorded.finishReason,
    usage: recorded.usage,
    ...(recorded.providerMetadata === undefined ? {} : { providerMetadata: recorded.providerMetadata }),
    response: { ...response, ...(timestamp === undefined ? {} : { timestamp: new Date(timestamp) }) },
    warnings: [],
  };
}

/** The recorded response as the stream a model's `doStream` would have sent. */
export function toStreamParts(recorded: RecordedResponse): LanguageModelV3StreamPart[] {
  const parts: LanguageModelV3StreamPart[] = [{ type: 'stream-start', warnings: [] }];
  const { timestamp, ...response } = recorded.response ?? {};
  parts.push({
    type: 'response-metadata',
    ...response,
    ...(timestamp === undefined ? {} : { timestamp: new Date(timestamp) }),
  });
  recorded.content.map(livePart).forEach((part, i) => {
    const id = String(i);
    const meta = part.providerMetadata === undefined ? {} : { providerMetadata: part.providerMetadata };
    if (part.type === 'text') {
      parts.push(
        { type: 'text-start', id, ...meta },
        { type: 'text-delta', id, delta: part.text },
        { type: 'text-end', id },
      );
    } else if (part.type === 'reasoning') {
      parts.push(
        { type: 'reasoning-start', id, ...meta },
        { type: 'reasoning-delta', id, delta: part.text },
        { type: 'reasoning-end', id },
      );
    } else {
      parts.push(part);
    }
  });
  parts.push({
    type: 'finish',
    usage: recorded.usage,
    finishReason: recorded.finishReason,
    ...(recorded.providerMetadata === undefined ? {} : { providerMetadata: recorded.providerMetadata }),
  });
  return parts;
}

/**
 * Gathers a streamed response into the content a generate call would have returned: texts and
 * reasonings by their id, in the order each began; every other content part as it came.
 */
export class StreamCollector {
  readonly content: LanguageModelV3Content[] = [];
  finish: Extract<LanguageModelV3StreamPart, { type: 'finish' }> | undefined;
  response: { id?: string; modelId?: string; timestamp?: Date } = {};
  readonly #open = new Map<string, { type: 'text' | 'reasoning'; text: string }>();

  add(part: LanguageModelV3StreamPart): void {
    switch (part.type) {
      case 'text-start':
      case 'reasoning-start': {
        const kind = part.type === 'text-start' ? 'text' : 'reasoning';
        const open = {
          type: kind,
          text: '',
          ...(part.providerMetadata === undefined ? {} : { providerMetadata: part.providerMetadata }),
        } as const;
        this.#open.set(`${kind}:${part.id}`, open);
        this.content.push(open);
        return;
      }
      case 'text-delta':
      case 'reasoning-delta': {
        const open = this.#open.get(`${part.type === 'text-delta' ? 'text' : 'reasoning'}:${part.id}`);
        if (open !== undefined) open.text += part.delta;
        return;
      }
      case 'response-metadata': {
        this.response = {
          ...(part.id === undefined ? {} : { id: part.id }),
          ...(part.modelId === undefined ? {} : { modelId: part.modelId }),
          ...(part.timestamp === undefined ? {} : { timestamp: part.timestamp }),
        };
        return;
      }
      case 'finish':
        this.finish = part;
        return;
      default:
        // A part that is content as it comes (a tool call, a file, a source; AI SDK 7's custom parts
        // and reasoning files): kept whole, in order.
        if (CONTENT_PARTS.has(part.type)) this.content.push(part as LanguageModelV3Content);
        return;
    }
  }
}

/** The stream parts that are content parts as they are (specifications v3 and v4). */
const CONTENT_PARTS: ReadonlySet<string> = new Set([
  'tool-call',
  'tool-result',
  'tool-approval-request',
  'file',
  'source',
  'custom',
  'reasoning-file',
]);

/**
 * The digest of the conversation a model call answers: its messages without the system ones (a system
 * prompt that says today's date must not make a restarted loop look like another conversation).
 */
export function promptDigest(prompt: LanguageModelV3CallOptions['prompt']): string {
  const conversation = prompt.filter((m) => m.role !== 'system');
  return createHash('sha256')
    .update(canonicalJson(plainJson(conversation)))
    .digest('hex');
}

/** How many model responses the conversation already holds: the step this call is. */
export function stepOf(prompt: LanguageModelV3CallOptions['prompt']): number {
  return prompt.filter((m) => m.role === 'assistant').length;
}

function plainPart(part: LanguageModelV3Content): LanguageModelV3Content {
  if (part.type === 'file' && part.data instanceof Uint8Array) {
    return { ...part, data: Buffer.from(part.data).toString('base64') };
  }
  return part;
}

/**
 * A recorded part as the model gave it: a file of AI SDK 7 (specification v4) given by URL gets its
 * `URL` back (the store keeps its text). Binary data stays base64, which both specifications take.
 */
function livePart(part: LanguageModelV3Content): LanguageModelV3Content {
  if (part.type !== 'file') return part;
  const data = part.data as unknown;
  if (typeof data === 'object' && data !== null && (data as { type?: unknown }).type === 'url') {
    const { url } = data as { url: unknown };
    if (typeof url === 'string')
      return { ...part, data: { ...data, url: new URL(url) } } as unknown as LanguageModelV3Content;
  }
  return part;
}

/** A value as JSON would carry it: binary as base64, URLs and dates as strings, undefined dropped. */
export function plainJson(value: unknown): JsonValue {
  return JSON.parse(
    JSON.stringify(value, (_key, v: unknown) =>
      v instanceof Uint8Array ? Buffer.from(v).toString('base64') : v instanceof URL ? v.href : v,
    ) ?? 'null',
  ) as JsonValue;
}
