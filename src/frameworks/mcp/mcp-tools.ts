import { OncelyError, ToolNotAttemptedError } from '../../errors/index.js';
import {
  defineTool,
  destructive,
  external,
  read,
  type Effect,
  type JsonSchemaObject,
  type ReconcileHook,
  type Tool,
  type ToolContext,
} from '../../tools/index.js';

/*
 * An MCP client's tools as oncely tools: each call reserved in the ledger before it is sent, keyed
 * `<run_id>:<tool_call_id>`, the key sent to the server in the request's `_meta`. Only the shape of
 * the client is assumed (`listTools`, `callTool` of @modelcontextprotocol/sdk's Client), so any
 * transport the application connects (stdio, streamable HTTP) works.
 */

/** Where the key travels in a `tools/call` request's `_meta`. */
export const MCP_KEY_META = 'oncely/idempotencyKey';
/** A server that wants the key as an argument declares this property; oncely fills it, the model never sees it. */
export const MCP_KEY_ARGUMENT = 'idempotency_key';
/** An error result whose `_meta` carries this as true says nothing was applied: the call is `failed`, not unknown. */
export const MCP_NOT_APPLIED_META = 'oncely/notApplied';

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
  readonly annotations?: McpToolAnnotations;
}

export interface McpCallResult {
  readonly content?: readonly unknown[];
  readonly structuredContent?: unknown;
  readonly isError?: boolean;
  readonly _meta?: Record<string, unknown>;
  readonly [key: string]: unknown;
}

/** What oncely needs of an MCP client (`Client` of @modelcontextprotocol/sdk has it). */
export interface McpClientLike {
  listTools(params?: { cursor?: string }): Promise<{ tools: McpToolInfo[]; nextCursor?: string }>;
  callTool(
    params: { name: string; arguments?: Record<string, unknown>; _meta?: Record<string, unknown> },
    resultSchema?: undefined,
    options?: { signal?: AbortSignal; timeout?: number },
  ): Promise<McpCallResult>;
}

export interface McpToolsOptions {
  /** Prepended to every tool's name (`billing_`), for several servers in one agent. */
  readonly prefix?: string;
  /** Only these tools (by their server names); default all. */
  readonly only?: readonly string[];
  /** An effect that says more than the annotations do (an approval, read retries), by server name. */
  readonly effects?: Readonly<Record<string, Effect>>;
  /** Reconcile hooks by server name: how to find out what became of a call nobody knows the outcome of. */
  readonly reconcile?: Readonly<Record<string, ReconcileHook>>;
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
  const names = new Set(listed.map((t) => t.name));
  for (const wanted of [
    ...(options.only ?? []),
    ...Object.keys(options.effects ?? {}),
    ...Object.keys(options.reconcile ?? {}),
  ]) {
    if (!names.has(wanted)) {
      throw new OncelyError(
        'TOOL_DEFINITION_INVALID',
        `the MCP server has no tool "${wanted}"; it has: ${[...names].join(', ') || '(none)'}`,
      );
    }
  }
  return listed
    .filter((t) => options.only === undefined || options.only.includes(t.name))
    .map((t) => mcpTool(client, t, options));
}

function mcpTool(client: McpClientLike, info: McpToolInfo, options: McpToolsOptions): Tool {
  const takesKey = isObject(info.inputSchema.properties) && MCP_KEY_ARGUMENT in info.inputSchema.properties;
  const timeoutMs = options.timeoutMs ?? 30_000;
  const reconcile = options.reconcile?.[info.name];
  return defineTool({
    name: `${options.prefix ?? ''}${info.name}`,
    description: info.description ?? info.title ?? info.annotations?.title ?? info.name,
    input: takesKey ? withoutKeyArgument(info.inputSchema) : info.inputSchema,
    effect: options.effects?.[info.name] ?? effectOfAnnotations(info.annotations),
    timeoutMs,
    ...(reconcile === undefined ? {} : { reconcile }),
    execute: (args, ctx) => callMcpTool(client, info.name, args, ctx, { takesKey, timeoutMs }),
  });
}

async function callMcpTool(
  client: McpClientLike,
  name: string,
  args: Record<string, unknown>,
  ctx: ToolContext,
  how: { takesKey: boolean; timeoutMs: number },
): Promise<unknown> {
  let result: McpCallResult;
  try {
    result = await client.callTool(
      {
        name,
        arguments: how.takesKey ? { ...args, [MCP_KEY_ARGUMENT]: ctx.idempotencyKey } : args,
        _meta: { [MCP_KEY_META]: ctx.idempotencyKey },
      },
      undefined,
      // oncely's own timeout aborts the signal first; the client's is a backstop past it.
      { signal: ctx.signal, timeout: how.timeoutMs + 5_000 },
    );
  } catch (error) {
    if (refusedBeforeRunning(error)) {
      throw new ToolNotAttemptedError(
        `the MCP server refused the call before running it: ${messageOf(error)}`,
      );
    }
    throw error; // a lost connection, a timeout, a server error: unknown, as for any write
  }
  if (result.isError === true) {
    const text = textOf(result) || 'the tool reported an error';
    // The server ran the tool and says it failed; only it can say that nothing was applied.
    if (result._meta?.[MCP_NOT_APPLIED_META] === true) throw new ToolNotAttemptedError(text);
    throw new Error(`the MCP tool "${name}" reported an error: ${text}`);
  }
  return result.structuredContent ?? { content: result.content ?? [] };
}

/** JSON-RPC errors that mean the request was refused as made (no such tool, bad parameters). */
const REFUSED_CODES = new Set([-32601, -32602]);

function refusedBeforeRunning(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'number' && REFUSED_CODES.has(code);
}

function withoutKeyArgument(schema: McpToolInfo['inputSchema']): JsonSchemaObject {
  const properties = { ...(schema.properties as Record<string, unknown>) };
  delete properties[MCP_KEY_ARGUMENT];
  const required = Array.isArray(schema.required)
    ? (schema.required as string[]).filter((r) => r !== MCP_KEY_ARGUMENT)
    : undefined;
  return { ...schema, properties, ...(required === undefined ? {} : { required }) };
}

function textOf(result: McpCallResult): string {
  return (result.content ?? [])
    .flatMap((c) => (isObject(c) && c.type === 'text' && typeof c.text === 'string' ? [c.text] : []))
    .join('\n');
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}
