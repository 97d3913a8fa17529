import type { McpServer, RegisteredTool } from '@modelcontextprotocol/sdk/server/mcp.js';
import { OncelyError } from '../../errors/index.js';
import { toJsonValue } from '../../ledger/index.js';
import { openKeyStore, requestFingerprint, type KeyStore } from '../../receiver/index.js';
import { MCP_KEY_STATUS_TOOL } from '../mcp/meta.js';
import { guardedHandler, type Guard, type ToolHandler } from './guard.js';
import { registerKeyStatus } from './key-status.js';

/*
 * `onceOnly(server, { store })`: every tool the server registers after it (`registerTool`, the
 * deprecated `tool`, and a handler swapped in with `update`) is guarded by the idempotency key oncely
 * sends in the request's `_meta`, and the server lists `oncely_key_status`, the lookup a client's
 * reconcile hook asks (`reconcile: 'server'` in oncely/mcp). What a guarded call does is in guard.ts.
 */

export interface OnceOnlyOptions {
  /** `sqlite:PATH`, `postgres://…`, or an open key store (`openKeyStore`). A URL is opened once per process. */
  readonly store: string | KeyStore;
  /** Refuse a call that carries no key (an error result saying nothing was done); default false: it runs unguarded. */
  readonly requireKey?: boolean;
  /** For a store given as a URL: how long a completed or failed key is kept; default 7 days. */
  readonly keepForMs?: number;
  /**
   * Whose keys a request's are (an authenticated client's id from `extra.authInfo`): the same key in
   * two scopes is two keys, and the lookup answers only within the caller's. Default one scope.
   */
  readonly scope?: (extra: { readonly authInfo?: unknown; readonly sessionId?: string }) => string;
}

const GUARDED = Symbol.for('oncely.mcp-server.onceOnly');
const shared = new Map<string, Promise<KeyStore>>();

/**
 * Guards an MCP server's tools by the idempotency key oncely sends: a repeat of a key gets the
 * stored result (marked `oncely/replayed`), never a second run; the key with other arguments, a
 * call still running, or one whose handler failed mid-way get an error result saying so. Wrap the
 * server before registering its tools.
 *
 * @example
 * const server = onceOnly(new McpServer({ name: 'billing', version: '1.0.0' }), { store: 'sqlite:./keys.db' });
 * server.registerTool('issue_credit', { inputSchema: { accountId: z.string() } }, issueCredit);
 */
export function onceOnly<S extends McpServer>(server: S, options: OnceOnlyOptions): S {
  const marked = server as S & { [GUARDED]?: true };
  if (marked[GUARDED] === true) {
    throw new OncelyError('TOOL_DEFINITION_INVALID', 'this MCP server is already guarded by onceOnly');
  }
  const early = Object.keys(
    (server as unknown as { _registeredTools?: Record<string, unknown> })._registeredTools ?? {},
  );
  if (early.length > 0) {
    throw new OncelyError(
      'TOOL_DEFINITION_INVALID',
      `onceOnly must wrap the MCP server before its tools are registered; already registered, unguarded: ${early.join(', ')}`,
    );
  }
  marked[GUARDED] = true;
  const guard: Guard = {
    store: keyStoreOf(options),
    requireKey: options.requireKey ?? false,
    scopeOf: (extra) => options.scope?.(extra) ?? '',
    fingerprint: requestFingerprint,
    toJson: toJsonValue,
  };
  const guarded = new Map<string, () => boolean>();
  const register = server.registerTool.bind(server) as unknown as Register;
  const registerOld = server.tool.bind(server) as unknown as (
    name: string,
    ...rest: unknown[]
  ) => RegisteredTool;

  const wrap = (
    name: string,
    handler: ToolHandler,
    make: (h: ToolHandler) => RegisteredTool,
  ): RegisteredTool => {
    if (name === MCP_KEY_STATUS_TOOL) {
      throw new OncelyError(
        'TOOL_DEFINITION_INVALID',
        `"${MCP_KEY_STATUS_TOOL}" is onceOnly's lookup; name the tool otherwise`,
      );
    }
    const holder: { tool?: RegisteredTool } = {};
    const readOnly = (): boolean => holder.tool?.annotations?.readOnlyHint === true;
    const tool = make(guardedHandler(guard, name, handler, readOnly));
    holder.tool = tool;
    guarded.set(name, () => !readOnly());
    const update = tool.update.bind(tool);
    tool.update = ((updates: { callback?: ToolHandler }) =>
      update(
        updates.callback === undefined
          ? updates
          : { ...updates, callback: guardedHandler(guard, name, updates.callback, readOnly) },
      )) as RegisteredTool['update'];
    return tool;
  };

  server.registerTool = ((name: string, config: object, handler: ToolHandler) =>
    wrap(name, handler, (h) => register(name, config, h))) as unknown as S['registerTool'];
  server.tool = (name: string, ...rest: unknown[]) => {
    const handler = rest.pop();
    if (typeof handler !== 'function') return registerOld(name, ...rest, handler);
    return wrap(name, handler as ToolHandler, (h) => registerOld(name, ...rest, h));
  };
  registerKeyStatus(register, guard, (tool) => guarded.get(tool)?.() ?? false);
  return server;
}

type Register = (name: string, config: object, handler: ToolHandler) => RegisteredTool;

function keyStoreOf(options: OnceOnlyOptions): () => Promise<KeyStore> {
  const { store } = options;
  if (typeof store !== 'string') return () => Promise.resolve(store);
  const id = `${store}#${options.keepForMs ?? ''}`;
  return () => {
    let opening = shared.get(id);
    if (opening === undefined) {
      // A store that failed to open is opened again by the next call.
      opening = openKeyStore(
        store,
        options.keepForMs === undefined ? {} : { keepForMs: options.keepForMs },
      ).catch((error: unknown) => {
        shared.delete(id);
        throw error;
      });
      shared.set(id, opening);
    }
    return opening;
  };
}
