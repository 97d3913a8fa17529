import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ROOT, waitFor } from '../support/processes.js';

export const MCP_SERVER = join(ROOT, 'test/frameworks/fixtures/mcp-billing-server.ts');

export type McpTransportKind = 'stdio' | 'http';

/** A connected MCP client of the billing server (its own process), and how to shut both down. */
export interface Connected {
  readonly client: Client;
  close(): Promise<void>;
}

export async function connectBilling(
  kind: McpTransportKind,
  env: Record<string, string>,
): Promise<Connected> {
  const client = new Client({ name: 'oncely-test', version: '1.0.0' });
  if (kind === 'stdio') {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: ['--import', 'tsx', MCP_SERVER],
      env: { ...(process.env as Record<string, string>), ...env, TRANSPORT: 'stdio' },
      cwd: ROOT,
      stderr: 'inherit',
    });
    await client.connect(transport);
    return { client, close: () => client.close() };
  }
  const server = startHttpServer(env);
  try {
    const port = await server.port;
    await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`)));
  } catch (error) {
    server.child.kill('SIGKILL');
    throw error;
  }
  return {
    client,
    async close() {
      await client.close();
      server.child.kill('SIGTERM');
      await server.exited;
    },
  };
}

function startHttpServer(env: Record<string, string>): {
  child: ChildProcess;
  port: Promise<number>;
  exited: Promise<void>;
} {
  let output = '';
  const child = spawn(process.execPath, ['--import', 'tsx', MCP_SERVER], {
    cwd: ROOT,
    env: { ...process.env, ...env, TRANSPORT: 'http' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const port = waitFor(
    'the MCP server to listen',
    () => {
      const match = /LISTENING (\d+)/.exec(output);
      return Promise.resolve(match === null ? undefined : Number(match[1]));
    },
    30_000,
  );
  return { child, port, exited };
}
