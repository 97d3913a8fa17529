import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { JsonValue } from '../../ledger/index.js';
import { assertReceiverKey, type KeyClaim, type KeyRecord, type KeyStore } from '../../receiver/index.js';
import {
  MCP_KEY_ARGUMENT,
  MCP_KEY_META,
  MCP_KEY_REFUSAL_META,
  MCP_KEY_STATUS_TOOL,
  MCP_NOT_APPLIED_META,
  MCP_REPLAYED_META,
} from '../mcp/meta.js';

/*
 * One guarded tool call. The key comes from the request's `_meta` (`oncely/idempotencyKey`), else
 * from an `idempotency_key` argument. The rules:
 *   - no key: the call runs unguarded, or with `requireKey` is refused (nothing done: `notApplied`);
 *   - a new key (or one whose last run applied nothing): the handler runs; its result is stored;
 *   - the key again with the same tool and arguments: the stored result, `_meta` `oncely/replayed`;
 *   - the key with another tool or other arguments: an error result naming what it was used for;
 *   - the key while its first call runs, or after its process died mid-way (`started`): an error
 *     result, never a second run;
 *   - a handler that threw: the key is recorded `unknown` and the error result says the outcome is
 *     unknown; a repeat gets the same, never a second run. A reconcile hook or an operator settles it.
 * A result with `isError` and `_meta` `oncely/notApplied: true` says nothing was applied: the key is
 * `failed` and a repeat runs again. Any other error result is the call's outcome, stored and replayed.
 * The refusals about the key carry no `notApplied`, for the key's first call may have taken effect,
 * except where nothing was ever begun (no key, an invalid one, the store unavailable).
 */

export type ToolHandler = (...params: unknown[]) => CallToolResult | Promise<CallToolResult>;

export interface Guard {
  readonly store: () => Promise<KeyStore>;
  readonly requireKey: boolean;
  readonly scopeOf: (extra: RequestExtra) => string;
  readonly fingerprint: (subject: string, payload: unknown) => string;
  readonly toJson: (value: unknown) => JsonValue;
}

export interface RequestExtra {
  readonly _meta?: Record<string, unknown>;
  readonly authInfo?: unknown;
  readonly sessionId?: string;
}

/** The handler of `tool` under the guard: the SDK calls it `(args, extra)`, or `(extra)` for a tool with no input. */
export function guardedHandler(
  guard: Guard,
  tool: string,
  handler: ToolHandler,
  readOnly: () => boolean,
): ToolHandler {
  return async (...params) => {
    const extra = (params.at(-1) ?? {}) as RequestExtra;
    const args = params.length > 1 ? params[0] : undefined;
    const key = keyOf(extra, args);
    if (readOnly() || (key === undefined && !guard.requireKey)) return handler(...params);
    if (key === undefined) {
      return refusal(
        'key_required',
        `the tool "${tool}" runs only with an idempotency key (in the request's _meta "${MCP_KEY_META}"); nothing was done`,
        true,
      );
    }
    let begun;
    let store: KeyStore;
    try {
      assertReceiverKey(key);
      store = await guard.store();
      begun = await store.begin({
        key,
        fingerprint: guard.fingerprint(tool, args),
        subject: tool,
        scope: guard.scopeOf(extra),
      });
    } catch (error) {
      return refusal('not_begun', `the call was not run: ${messageOf(error)}; nothing was done`, true);
    }
    switch (begun.kind) {
      case 'run':
        return run(guard, store, begun.claim, tool, () => handler(...params));
      case 'replay':
        return replayOf(begun.record);
      case 'mismatch':
        return refusal('mismatch', mismatchText(key, tool, begun.record), false);
      case 'in_progress':
        return refusal(
          'in_progress',
          `a call with the idempotency key "${key}" started at ${begun.record.startedAt} and has not finished ` +
            '(it is still running, or its process died mid-way); it is not run again: ask ' +
            `${MCP_KEY_STATUS_TOOL} what became of it`,
          false,
        );
      case 'unknown':
        return refusal(
          'unknown',
          `the call with the idempotency key "${key}" failed mid-way (${begun.record.error ?? 'no message'}); ` +
            `whether it took effect is unknown, so it is not run again: reconcile it (${MCP_KEY_STATUS_TOOL}), ` +
            "or settle the key on the server (the key store's settle)",
          false,
        );
    }
  };
}

async function run(
  guard: Guard,
  store: KeyStore,
  claim: KeyClaim,
  tool: string,
  call: () => CallToolResult | Promise<CallToolResult>,
): Promise<CallToolResult> {
  let result: CallToolResult;
  try {
    result = await call();
  } catch (error) {
    const message = messageOf(error);
    await settleQuietly(() => store.abandon(claim, message));
    return refusal(
      'unknown',
      `the tool "${tool}" failed mid-way: ${message}. Whether it took effect is unknown; the key ` +
        `"${claim.key}" is recorded unknown and the call will not run again by itself`,
      false,
    );
  }
  if (result.isError === true && result._meta?.[MCP_NOT_APPLIED_META] === true) {
    await settleQuietly(() => store.fail(claim, textOf(result)));
    return result;
  }
  // The effect stands: the caller hears the result even where it cannot be stored (the key stays started).
  await settleQuietly(() => store.complete(claim, guard.toJson(result)));
  return result;
}

/** A store write after the handler ran: its failure must not turn the handler's truth into an error. */
async function settleQuietly(write: () => Promise<boolean>): Promise<void> {
  try {
    const taken = await write();
    if (!taken) {
      process.emitWarning(
        'oncely: a guarded MCP call finished after its key was settled by hand; the settlement stands',
      );
    }
  } catch (error) {
    process.emitWarning(`oncely: the outcome of a guarded MCP call could not be stored: ${messageOf(error)}`);
  }
}

function replayOf(record: KeyRecord): CallToolResult {
  const stored = (record.response ?? {}) as CallToolResult;
  return { ...stored, _meta: { ...stored._meta, [MCP_REPLAYED_META]: true } };
}

function mismatchText(key: string, tool: string, record: KeyRecord): string {
  const usedFor =
    record.subject !== null && record.subject !== tool
      ? `a call of another tool, "${record.subject}"`
      : `a call of "${tool}" with other arguments`;
  return (
    `the idempotency key "${key}" was used for ${usedFor}; nothing was done now, and that call's ` +
    'outcome stands: a new call needs a new key'
  );
}

function refusal(reason: string, text: string, notApplied: boolean): CallToolResult {
  return {
    isError: true,
    content: [{ type: 'text', text }],
    _meta: { [MCP_KEY_REFUSAL_META]: reason, ...(notApplied ? { [MCP_NOT_APPLIED_META]: true } : {}) },
  };
}

function keyOf(extra: RequestExtra, args: unknown): unknown {
  const fromMeta = extra._meta?.[MCP_KEY_META];
  if (fromMeta !== undefined) return fromMeta;
  if (typeof args === 'object' && args !== null && MCP_KEY_ARGUMENT in args) {
    return (args as Record<string, unknown>)[MCP_KEY_ARGUMENT];
  }
  return undefined;
}

function textOf(result: CallToolResult): string {
  return result.content.flatMap((c) => (c.type === 'text' ? [c.text] : [])).join('\n');
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
