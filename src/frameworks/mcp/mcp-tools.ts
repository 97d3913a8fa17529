import { OncelyError } from '../../errors/index.js';
import type { RepeatPolicy } from '../../ledger/index.js';
import {
  defineTool,
  destructive,
  external,
  read,
  type Effect,
  type JsonSchemaObject,
  type ReconcileHook,
  type Tool,
} from '../../tools/index.js';
import { realClock } from '../../util/clock.js';
import { callMcpTool, outputCheckOf, type McpRequester } from './mcp-call.js';
import { MCP_KEY_ARGUMENT, MCP_KEY_STATUS_TOOL } from './meta.js';
import { serverReconcile } from './server-reconcile.js';
import { mcpToolNames } from './tool-names.js';

/*
 * An MCP client's tools as oncely tools: each call reserved in the ledger before it is sent, keyed
 * `<run_id>:<tool_call_id>`, the key sent to the server in the request's `_meta`. Only the shape of
 * the client is assumed (`listTools`, `request` and `transport` of @modelcontextprotocol/sdk's
 * Client), so any transport the application connects (stdio, streamable HTTP) works. What a call's
 * answer and errors become is in mcp-call.ts.
 */

export interface McpToolAnnotations {
  readonly title?: string;
  readonly readOnlyHint?: boolean;
  readonly destructiveHint?: boolean;
  readonly idempotentHint?: boolean;
  readonly openWorldHint?: boolean;
}

export interface McpToolInfo {
  readonly name: string;
  readonly title?: string;
  readonly description?: string;
  readonly inputSchema: { readonly type: 'object'; readonly [keyword: string]: unknown };
  /** Checked by oncely, not by the SDK client: a result that breaks it still took effect. */
  readonly outputSchema?: { readonly type: 'object'; readonly [keyword: string]: unknown };
  readonly annotations?: McpToolAnnotations;
}

/** What oncely needs of an MCP client (`Client` of @modelcontextprotocol/sdk has it). */
export interface McpClientLike extends McpRequester {
  listTools(params?: { cursor?: string }): Promise<{ tools: McpToolInfo[]; nextCursor?: string }>;
}

export interface McpToolsOptions {
  /**
   * Joined to every tool's name with `_` (`billing` → `billing_issue_credit`; `billing_` too), for
   * several servers in one agent. A-Z a-z 0-9 _ - only. Other characters of a server's tool names
   * become `_`; a name over 64 characters, or two tools that would share a name, are refused.
   */
  readonly prefix?: string;
  /** Only these tools (by their server names); default all. */
  readonly only?: readonly string[];
  /** An effect that says more than the annotations do (an approval, read retries), by server name. */
  readonly effects?: Readonly<Record<string, Effect>>;
  /**
   * Reconcile hooks by server name: how to find out what became of a call nobody knows the outcome
   * of. `'server'` asks the server's own lookup (`oncely_key_status`, listed by a server guarded
   * with `onceOnly` from oncely/mcp-server).
   */
  readonly reconcile?: Readonly<Record<string, ReconcileHook | 'server'>>;
  /** A tool's own repeat policy (`ask`, `refuse`, `allow`), by server name; not for a read. */
  readonly onRepeat?: Readonly<Record<string, RepeatPolicy>>;
  /**
   * What makes two calls of a tool the same effect, by server name (its `repeatKey`); default every
   * argument. Not for a read.
   */
  readonly repeatKey?: Readonly<Record<string, (args: Record<string, unknown>) => unknown>>;
  /** Milliseconds per attempt before the request is cancelled; default 30000. */
  readonly timeoutMs?: number;
}

/**
 * The effect an MCP tool's annotations declare: `readOnlyHint` → a read; otherwise `destructiveHint`
 * (true unless said false, as the specification assumes) → destructive; a tool that says it is
 * neither → external. Hints come from the server; pass `effects` to say more.
 */
export function effectOfAnnotations(annotations: McpToolAnnotations | undefined): Effect {
  if (annotations?.readOnlyHint === true) return read();
  if (annotations?.destructiveHint === false) return external();
  return destructive();
}

/**
 * The tools of a connected MCP client as oncely tools, for `executeToolCall`, an agent's `tools` or
 * `durableLoop().tools()`.
 *
 * @example
 * const client = new Client({ name: 'support-bot', version: '1.0.0' });
 * await client.connect(new StdioClientTransport({ command: 'node', args: ['billing-server.js'] }));
 * const tools = await mcpTools(client, { reconcile: { issue_credit: findCreditByKey } });
 */
export async function mcpTools(client: McpClientLike, options: McpToolsOptions = {}): Promise<Tool[]> {
  const listed: McpToolInfo[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < 1000; page++) {
    const result = await client.listTools(cursor === undefined ? undefined : { cursor });
    listed.push(...result.tools);
    cursor = result.nextCursor;
    if (cursor === undefined || cursor === '') break;
  }
  // The server's key lookup is oncely's to call, never the model's.
  const offered = listed.filter((t) => t.name !== MCP_KEY_STATUS_TOOL);
  const names = new Set(offered.map((t) => t.name));
  for (const wanted of [
    ...(options.only ?? []),
    ...Object.keys(options.effects ?? {}),
    ...Object.keys(options.reconcile ?? {}),
    ...Object.keys(options.onRepeat ?? {}),
    ...Object.keys(options.repeatKey ?? {}),
  ]) {
    if (!names.has(wanted)) {
      throw new OncelyError(
        'TOOL_DEFINITION_INVALID',
        `the MCP server has no tool "${wanted}"; it has: ${[...names].join(', ') || '(none)'}`,
      );
    }
  }
  const serverReconciled = Object.entries(options.reconcile ?? {}).filter(([, hook]) => hook === 'server');
  if (serverReconciled.length > 0 && !listed.some((t) => t.name === MCP_KEY_STATUS_TOOL)) {
    throw new OncelyError(
      'TOOL_DEFINITION_INVALID',
      `reconcile "server" for ${serverReconciled.map(([name]) => `"${name}"`).join(', ')} needs the server's ` +
        `${MCP_KEY_STATUS_TOOL} lookup, which it does not list: guard the server with onceOnly ` +
        '(oncely/mcp-server), or give a reconcile hook of your own',
    );
  }
  const taken = offered.filter((t) => options.only === undefined || options.only.includes(t.name));
  const oncelyNames = mcpToolNames(
    options.prefix ?? '',
    taken.map((t) => t.name),
  );
  return taken.map((t) => mcpTool(client, t, oncelyNames.get(t.name) ?? t.name, options));
}

function mcpTool(client: McpClientLike, info: McpToolInfo, name: string, options: McpToolsOptions): Tool {
  const takesKey = isObject(info.inputSchema.properties) && MCP_KEY_ARGUMENT in info.inputSchema.properties;
  const timeoutMs = options.timeoutMs ?? 30_000;
  const onRepeat = options.onRepeat?.[info.name];
  const repeatKey = options.repeatKey?.[info.name];
  const output = outputCheckOf(info.name, info.outputSchema);
  const hook = options.reconcile?.[info.name];
  const reconcile: ReconcileHook | undefined =
    hook === 'server' ? serverReconcile(client, info.name, output, () => realClock.now()) : hook;
  return defineTool({
    name,
    description: info.description ?? info.title ?? info.annotations?.title ?? info.name,
    input: takesKey ? withoutKeyArgument(info.inputSchema) : info.inputSchema,
    effect: options.effects?.[info.name] ?? effectOfAnnotations(info.annotations),
    timeoutMs,
    ...(reconcile === undefined ? {} : { reconcile }),
    // Like any tool's: without these, a repeat is every argument the same, and `ask`.
    ...(onRepeat === undefined ? {} : { onRepeat }),
    ...(repeatKey === undefined ? {} : { repeatKey }),
    execute: (args, ctx) => callMcpTool(client, info.name, args, ctx, { takesKey, timeoutMs, output }),
  });
}

function withoutKeyArgument(schema: McpToolInfo['inputSchema']): JsonSchemaObject {
  const properties = { ...(schema.properties as Record<string, unknown>) };
  delete properties[MCP_KEY_ARGUMENT];
  const required = Array.isArray(schema.required)
    ? (schema.required as string[]).filter((r) => r !== MCP_KEY_ARGUMENT)
    : undefined;
  return { ...schema, properties, ...(required === undefined ? {} : { required }) };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}
