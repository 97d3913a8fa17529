import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, openRuntime } from '../../src/index.js';
import { ROOT, waitFor } from '../support/processes.js';
import { openTestStore } from '../support/stores.js';
import { MCP_SERVER } from './mcp-support.js';

/*
 * MCP servers named in oncely.yaml: one started by oncely over stdio, one reached over streamable
 * HTTP, their tools given to an agent whose run credits through them.
 */
describe('mcp_servers in oncely.yaml', () => {
  let dir: string;
  let books: string;
  let httpUrl: string;
  let stopHttp: () => void;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'oncely-mcp-config-'));
    books = join(dir, 'books.jsonl');
    let output = '';
    const http = spawn(process.execPath, ['--import', 'tsx', MCP_SERVER], {
      cwd: ROOT,
      env: { ...process.env, BOOKS: join(dir, 'remote-books.jsonl'), TRANSPORT: 'http', TOKEN: 'secret' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    http.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
    stopHttp = () => http.kill('SIGKILL');
    const port = await waitFor(
      'the MCP server to listen',
      () => Promise.resolve(/LISTENING (\d+)/.exec(output)?.[1]),
      30_000,
    );
    httpUrl = `http://127.0.0.1:${port}/mcp`;
  }, 60_000);
  afterAll(() => {
    stopHttp?.();
    rmSync(dir, { recursive: true, force: true });
  });

  const write = (yaml: string): string => {
    const file = join(dir, `oncely-${Math.random().toString(36).slice(2)}.yaml`);
    writeFileSync(file, yaml);
    return file;
  };
  const stdioServer = `
    command: ${JSON.stringify(process.execPath)}
    args: [--import, tsx, ${JSON.stringify(MCP_SERVER)}]
    cwd: ${JSON.stringify(ROOT)}
    env: { BOOKS: "\${TEST_BOOKS}", TRANSPORT: stdio }`;

  it('starts a stdio server, reaches an HTTP one, and gives their tools to an agent whose run credits once', async () => {
    const file = write(`
mcp_servers:
  billing:${stdioServer}
  remote:
    url: ${httpUrl}
    headers: { Authorization: "Bearer \${TEST_TOKEN}" }
    only: [find_credit, issue_credit]
    effects: { issue_credit: { kind: external, approval: true } }
    on_repeat: { issue_credit: refuse }
    repeat_key: { issue_credit: [accountId] }
models:
  demo:
    provider: scripted
    steps:
      - toolCalls: [{ toolName: billing_issue_credit, input: { accountId: acct_7, amountCents: 2500 } }]
      - text: I credited $25.
agents:
  - name: support
    instructions: Help.
    model: demo
    tools: [billing_issue_credit, remote_find_credit]
`);
    const config = await loadConfig(file, {
      env: { ...process.env, TEST_BOOKS: books, TEST_TOKEN: 'secret' },
    });
    try {
      expect([...config.tools.keys()].sort()).toEqual([
        'billing_charge_card',
        'billing_close_account',
        'billing_find_credit',
        'billing_issue_credit',
        'remote_find_credit',
        'remote_issue_credit',
      ]);
      expect(config.tools.get('billing_issue_credit')?.effect).toMatchObject({
        kind: 'external',
        approval: false,
      });
      expect(config.tools.get('remote_issue_credit')?.effect).toMatchObject({
        kind: 'external',
        approval: true,
      });
      expect(config.tools.get('remote_find_credit')?.effect.kind).toBe('read');
      // A tool's repeat policy and identity, as for any tool; the others keep the defaults.
      const remote = config.tools.get('remote_issue_credit');
      expect(remote?.onRepeat).toBe('refuse');
      expect(remote?.repeatKey?.({ accountId: 'acct_7', amountCents: 1 })).toEqual(['acct_7']);
      expect(config.tools.get('billing_issue_credit')?.onRepeat).toBeUndefined();

      const opened = await openTestStore('sqlite', 'mcp-config');
      const runtime = await openRuntime({
        store: opened.store,
        agents: [...config.agents.values()],
        tools: [...config.tools.values()],
      });
      try {
        const run = await runtime.run({
          tenantId: 'acme',
          agent: 'support',
          input: 'refund me',
          runId: 'mcp-yaml-1',
        });
        expect(run.status).toBe('completed');
        const credits = readFileSync(books, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as { key: string });
        expect(credits).toHaveLength(1);
        expect(credits[0]?.key).toMatch(/^mcp-yaml-1:call_[0-9a-f]{16}$/);
      } finally {
        await runtime.close();
        await opened.cleanup();
      }
    } finally {
      await config.close();
    }
  }, 60_000);

  it('joins a prefix to the tool names with _ as documented: crm and crm_ alike, the server name by default', async () => {
    const remote = (prefix: string) => `
    url: ${httpUrl}
    headers: { Authorization: "Bearer \${TEST_TOKEN}" }
    only: [find_credit]${prefix}`;
    const file = write(`
mcp_servers:
  one:${remote('\n    prefix: crm')}
  two:${remote('\n    prefix: books_')}
  three:${remote('')}
`);
    const config = await loadConfig(file, { env: { ...process.env, TEST_TOKEN: 'secret' } });
    try {
      expect([...config.tools.keys()].sort()).toEqual([
        'books_find_credit',
        'crm_find_credit',
        'three_find_credit',
      ]);
    } finally {
      await config.close();
    }
  }, 60_000);

  it.each([
    [
      'both a command and a url',
      `  both:\n    command: node\n    url: http://127.0.0.1:1/mcp`,
      /give either command .* or url/,
    ],
    [
      'a variable that is not set',
      `  billing:${stdioServer.replace('${TEST_BOOKS}', '${NOT_SET_ANYWHERE}')}`,
      /uses \$\{NOT_SET_ANYWHERE\}, which is not set/,
    ],
    [
      'a server that does not start',
      `  broken:\n    command: /nonexistent/mcp-server`,
      /cannot connect to the MCP server "broken" \(\/nonexistent\/mcp-server\)/,
    ],
    [
      'an HTTP server that refuses the request (a wrong token)',
      `  remote:\n    url: URL_HERE\n    headers: { Authorization: "Bearer wrong" }`,
      /cannot connect to the MCP server "remote"/,
    ],
    [
      'reconcile: server for a server that lists no key lookup',
      `  remote:\n    url: URL_HERE\n    headers: { Authorization: "Bearer secret" }\n    reconcile: { issue_credit: server }`,
      /needs the server's oncely_key_status lookup, which it does not list/,
    ],
    [
      'a server with no such tool',
      `  billing:${stdioServer}\n    only: [refund]`,
      /has no tool "refund"; it has: .*issue_credit/,
    ],
  ])(
    'refuses %s, naming the file, the path and what to do',
    async (_what, servers, message) => {
      const file = write(`mcp_servers:\n${servers.replace('URL_HERE', httpUrl)}\n`);
      const error = await loadConfig(file, { env: { ...process.env, TEST_BOOKS: books } }).then(
        async (config) => {
          await config.close();
          return undefined;
        },
        (e: unknown) => e as Error & { code?: string },
      );
      expect(error?.code).toBe('CONFIG_INVALID');
      expect(error?.message).toContain(file);
      expect(error?.message).toContain('mcp_servers');
      expect(error?.message).toMatch(message);
      expect(existsSync(books) ? readFileSync(books, 'utf8') : '').not.toContain('refund');
    },
    60_000,
  );
});
