import { resolve } from 'node:path';
import type { McpClientLike } from '../frameworks/mcp/index.js';
import { mcpTools } from '../frameworks/mcp/index.js';
import { expandEnv } from '../util/env-vars.js';
import { destructive, external, read, write, type Effect, type Tool } from '../tools/index.js';
import type { ConfigDocument, McpServerDocument } from './config-schema.js';
import type { ConfigProblem } from './config-source.js';

type Env = Readonly<Record<string, string | undefined>>;

/** The connected MCP servers of a configuration: their tools, and how to close them. */
export interface McpServers {
  readonly tools: Map<string, Tool>;
  close(): Promise<void>;
}

interface Sdk {
  Client: new (info: { name: string; version: string }) => McpClientLike & {
    connect(transport: unknown, options?: { timeout?: number }): Promise<void>;
    close(): Promise<void>;
  };
  StdioClientTransport: new (options: Record<string, unknown>) => unknown;
  StreamableHTTPClientTransport: new (url: URL, options?: Record<string, unknown>) => unknown;
}

/** A problem with a server, as the configuration reports it (path under `mcp_servers`). */
export class McpServerProblem extends Error {
  constructor(
    readonly problem: ConfigProblem,
    options?: { cause?: unknown },
  ) {
    super(problem.message, options);
  }
}

/**
 * Connects every server of `mcp_servers` (stdio ones are started) and takes their tools. The SDK
 * (@modelcontextprotocol/sdk, an optional peer dependency) is loaded only when there are servers.
 */
export async function connectMcpServers(
  doc: ConfigDocument,
  env: Env,
  baseDir: string,
  timeoutMs: number,
): Promise<McpServers> {
  const servers = Object.entries(doc.mcp_servers ?? {});
  const connected: { close(): Promise<void> }[] = [];
  const close = async (): Promise<void> => {
    await Promise.allSettled(connected.map((c) => c.close()));
  };
  const tools = new Map<string, Tool>();
  if (servers.length === 0) return { tools, close };
  const sdk = await loadSdk();
  try {
    for (const [name, server] of servers) {
      const client = new sdk.Client({ name: 'oncely', version: '1' });
      const at = ['mcp_servers', name];
      try {
        await client.connect(transportOf(sdk, server, env, baseDir, at), { timeout: timeoutMs });
      } catch (cause) {
        if (cause instanceof McpServerProblem) throw cause;
        throw new McpServerProblem(
          {
            path: at,
            message: `cannot connect to the MCP server "${name}" (${where(server)}): ${messageOf(cause)}`,
          },
          { cause },
        );
      }
      connected.push(client);
      let listed: Tool[];
      try {
        listed = await mcpTools(client, {
          prefix: server.prefix ?? name,
          ...(server.only === undefined ? {} : { only: server.only }),
          ...(server.reconcile === undefined ? {} : { reconcile: server.reconcile }),
          ...(server.effects === undefined ? {} : { effects: effectsOf(server.effects) }),
          ...(server.on_repeat === undefined ? {} : { onRepeat: server.on_repeat }),
          ...(server.repeat_key === undefined ? {} : { repeatKey: repeatKeysOf(server.repeat_key) }),
          ...(server.timeout_ms === undefined ? {} : { timeoutMs: server.timeout_ms }),
        });
      } catch (cause) {
        throw new McpServerProblem(
          { path: at, message: `the MCP server "${name}": ${messageOf(cause)}` },
          { cause },
        );
      }
      for (const tool of listed) {
        if (tools.has(tool.name)) {
          throw new McpServerProblem({
            path: at,
            message: `its tool "${tool.name}" has the name of another server's tool; give the servers prefixes that differ`,
          });
        }
        tools.set(tool.name, tool);
      }
    }
  } catch (error) {
    await close();
    throw error;
  }
  return { tools, close };
}

async function loadSdk(): Promise<Sdk> {
  try {
    const [client, stdio, http] = await Promise.all([
      import('@modelcontextprotocol/sdk/client/index.js'),
      import('@modelcontextprotocol/sdk/client/stdio.js'),
      import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    ]);
    return {
      Client: client.Client as unknown as Sdk['Client'],
      StdioClientTransport: stdio.StdioClientTransport as unknown as Sdk['StdioClientTransport'],
      StreamableHTTPClientTransport:
        http.StreamableHTTPClientTransport as unknown as Sdk['StreamableHTTPClientTransport'],
    };
  } catch (cause) {
    throw new McpServerProblem(
      {
        path: ['mcp_servers'],
        message:
          'MCP servers need the MCP SDK, which is not installed here: `npm install @modelcontextprotocol/sdk` ' +
          `(${messageOf(cause)})`,
      },
      { cause },
    );
  }
}

function transportOf(
  sdk: Sdk,
  server: McpServerDocument,
  env: Env,
  baseDir: string,
  at: (string | number)[],
): unknown {
  if (server.url !== undefined) {
    const headers = expandAll(server.headers, env, [...at, 'headers']);
    return new sdk.StreamableHTTPClientTransport(
      new URL(server.url),
      headers === undefined ? {} : { requestInit: { headers } },
    );
  }
  const own = expandAll(server.env, env, [...at, 'env']);
  return new sdk.StdioClientTransport({
    command: server.command,
    args: server.args ?? [],
    // The server gets this process's environment (PATH, HOME, ...) with its own values on top.
    env: { ...definedOnly(env), ...own },
    cwd: resolve(baseDir, server.cwd ?? '.'),
    stderr: 'inherit',
  });
}

/** `${VAR}` in each value, from the environment; a variable that is not set is a problem naming it. */
function expandAll(
  values: Readonly<Record<string, string>> | undefined,
  env: Env,
  at: (string | number)[],
): Record<string, string> | undefined {
  if (values === undefined) return undefined;
  return Object.fromEntries(
    Object.entries(values).map(([key, value]) => {
      const expanded = expandEnv(value, env);
      if ('missing' in expanded) {
        throw new McpServerProblem({
          path: [...at, key],
          message: `uses \${${expanded.missing}}, which is not set in the environment`,
        });
      }
      return [key, expanded.value];
    }),
  );
}

function effectsOf(effects: NonNullable<McpServerDocument['effects']>): Record<string, Effect> {
  return Object.fromEntries(
    Object.entries(effects).map(([tool, effect]) => {
      const { kind, approval } = typeof effect === 'string' ? { kind: effect, approval: undefined } : effect;
      const made =
        kind === 'read'
          ? read()
          : kind === 'write'
            ? write()
            : kind === 'external'
              ? external(approval === undefined ? {} : { approval })
              : destructive(approval === undefined ? {} : { approval });
      return [tool, made];
    }),
  );
}

/** `repeat_key: { tool: [arguments] }`: a tool's identity is those arguments' values, in that order. */
function repeatKeysOf(
  keys: NonNullable<McpServerDocument['repeat_key']>,
): Record<string, (args: Record<string, unknown>) => unknown> {
  return Object.fromEntries(
    Object.entries(keys).map(([tool, names]) => [
      tool,
      (args: Record<string, unknown>) => names.map((name) => args[name] ?? null),
    ]),
  );
}

function definedOnly(env: Env): Record<string, string> {
  return Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
}

function where(server: McpServerDocument): string {
  return server.url ?? [server.command, ...(server.args ?? [])].join(' ');
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** A configuration error from a server problem, as the caller's source names it. */
export function isMcpServerProblem(error: unknown): error is McpServerProblem {
  return error instanceof McpServerProblem;
}
