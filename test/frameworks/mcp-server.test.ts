import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { mcpTools } from '../../src/frameworks/mcp/index.js';
import { onceOnly } from '../../src/frameworks/mcp-server/index.js';
import { openKeyStore, type KeyStore } from '../../src/receiver/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';
import { ROOT, waitFor } from '../support/processes.js';
import { STORE_KINDS, openTestStore, type StoreKind } from '../support/stores.js';
import {
  Runtimes,
  TENANT,
  callIdsOf,
  keyOf,
  scriptedAgent,
  startAndDrive,
  toolResultsIn,
} from '../runs/fixtures.js';

/*
 * An MCP server guarded by onceOnly (oncely/mcp-server), in its own processes over streamable HTTP,
 * its keys on a SQLite file or in PostgreSQL: a repeat replayed, never run again; another payload
 * refused; 50 calls of one key at once across two processes run once; a handler that threw, or a
 * process killed mid-handler, never run again; and an oncely run whose call's outcome was unknown
 * settled by `reconcile: 'server'` through the server's lookup.
 */

const SERVER = join(ROOT, 'test/frameworks/fixtures/mcp-once-server.ts');

interface Started {
  readonly child: ChildProcess;
  readonly client: Client;
  stop(): Promise<void>;
}

async function startServer(env: Record<string, string>): Promise<Started> {
  let output = '';
  const child = spawn(process.execPath, ['--import', 'tsx', SERVER], {
    cwd: ROOT,
    env: { ...process.env, ...env, TRANSPORT: 'http' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const port = await waitFor(
    'the guarded MCP server to listen',
    () => Promise.resolve(/LISTENING (\d+)/.exec(output)?.[1]),
    30_000,
  );
  const client = new Client({ name: 'once-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`)));
  return {
    child,
    client,
    async stop() {
      await client.close().catch(() => undefined);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

async function keysDatabase(kind: StoreKind): Promise<{ url: string; drop(): Promise<void> }> {
  if (kind === 'postgres') return createTestDatabase('mcp_server_keys');
  const file = tempSqlitePath('mcp-server-keys');
  return { url: `sqlite:${file.path}`, drop: () => Promise.resolve(file.cleanup()) };
}

const credit = (client: Client, key: string | undefined, args: Record<string, unknown>) =>
  client.callTool({
    name: 'issue_credit',
    arguments: args,
    ...(key === undefined ? {} : { _meta: { 'oncely/idempotencyKey': key } }),
  }) as Promise<CallToolResult>;

const keyStatus = async (client: Client, key: string, tool?: string) =>
  (
    (await client.callTool({
      name: 'oncely_key_status',
      arguments: tool === undefined ? { key } : { key, tool },
    })) as CallToolResult
  ).structuredContent as Record<string, unknown>;

const textOf = (result: CallToolResult): string =>
  result.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');

describe.each(STORE_KINDS)('an MCP server guarded by onceOnly, its keys on %s', (kind) => {
  let dir: string;
  let books: string;
  let keys: { url: string; drop(): Promise<void> };
  let main: Started;
  const started: Started[] = [];
  const runtimes = new Runtimes();
  const entries = (): { tool: string; key: string | null; pid: number; receipt?: string }[] =>
    existsSync(books)
      ? readFileSync(books, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as { tool: string; key: string | null; pid: number })
      : [];
  const runsOf = (key: string) => entries().filter((e) => e.key === key);
  const start = async (): Promise<Started> => {
    const server = await startServer({ KEYS: keys.url, BOOKS: books });
    started.push(server);
    return server;
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'oncely-mcp-server-'));
    books = join(dir, 'books.jsonl');
    keys = await keysDatabase(kind);
    main = await start();
  }, 60_000);
  afterAll(async () => {
    await runtimes.closeAll();
    await Promise.all(started.map((s) => s.stop()));
    await keys?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('runs a key once and replays its stored result, marked; the lookup tells what became of it', async () => {
    const args = { accountId: 'acct_7', amountCents: 2500 };
    const first = await credit(main.client, 'run_a:call_1', args);
    const again = await credit(main.client, 'run_a:call_1', args);
    expect(first.isError).toBeFalsy();
    expect(again.structuredContent).toEqual(first.structuredContent);
    expect(again._meta?.['oncely/replayed']).toBe(true);
    expect(first._meta?.['oncely/replayed']).toBeUndefined();
    expect(runsOf('run_a:call_1')).toHaveLength(1);
    expect(await keyStatus(main.client, 'run_a:call_1', 'issue_credit')).toMatchObject({
      status: 'completed',
      tool: 'issue_credit',
      result: { structuredContent: first.structuredContent },
    });
    expect(await keyStatus(main.client, 'run_a:never')).toMatchObject({ status: 'not_found' });
    // A read is not guarded: it runs each time, and the lookup says its calls are not the key's to tell.
    await main.client.callTool({
      name: 'find_credit',
      arguments: { accountId: 'acct_7' },
      _meta: { 'oncely/idempotencyKey': 'r:1' },
    });
    await main.client.callTool({
      name: 'find_credit',
      arguments: { accountId: 'acct_7' },
      _meta: { 'oncely/idempotencyKey': 'r:1' },
    });
    expect(entries().filter((e) => e.tool === 'find_credit')).toHaveLength(2);
    expect(await keyStatus(main.client, 'r:1', 'find_credit')).toMatchObject({ status: 'not_guarded' });
  });

  it('refuses the key with other arguments, naming the mismatch; a call with no key runs unguarded', async () => {
    await credit(main.client, 'run_b:call_1', { accountId: 'acct_8', amountCents: 100 });
    const other = await credit(main.client, 'run_b:call_1', { accountId: 'acct_8', amountCents: 9900 });
    expect(other.isError).toBe(true);
    expect(other._meta).toEqual({ 'oncely/keyRefusal': 'mismatch' });
    expect(textOf(other)).toMatch(
      /"run_b:call_1" was used for a call of "issue_credit" with other arguments/,
    );
    expect(runsOf('run_b:call_1')).toHaveLength(1);
    const before = entries().filter((e) => e.key === null).length;
    await credit(main.client, undefined, { accountId: 'acct_9', amountCents: 100 });
    await credit(main.client, undefined, { accountId: 'acct_9', amountCents: 100 });
    expect(entries().filter((e) => e.key === null).length - before).toBe(2);
  });

  it('a handler that threw leaves its outcome unknown: the repeat is refused, never run; a declined call runs again', async () => {
    const args = { accountId: 'acct_t', amountCents: 300, outcome: 'throw' };
    const thrown = await credit(main.client, 'run_c:call_1', args);
    expect(thrown.isError).toBe(true);
    expect(textOf(thrown)).toMatch(
      /failed mid-way: the bank connection reset\. Whether it took effect is unknown/,
    );
    expect(thrown._meta?.['oncely/notApplied']).toBeUndefined();
    const repeat = await credit(main.client, 'run_c:call_1', args);
    expect(repeat._meta).toEqual({ 'oncely/keyRefusal': 'unknown' });
    expect(runsOf('run_c:call_1')).toHaveLength(1);
    expect(await keyStatus(main.client, 'run_c:call_1')).toMatchObject({
      status: 'unknown',
      error: 'the bank connection reset',
    });

    const declined = { accountId: 'acct_d', amountCents: 300, outcome: 'decline' };
    expect((await credit(main.client, 'run_c:call_2', declined))._meta?.['oncely/notApplied']).toBe(true);
    expect(await keyStatus(main.client, 'run_c:call_2')).toMatchObject({ status: 'failed' });
    await credit(main.client, 'run_c:call_2', declined);
    expect(runsOf('run_c:call_2')).toHaveLength(2);
  });

  it('runs one of 50 calls of one key at once, sent to two server processes', async () => {
    const second = await start();
    const args = { accountId: 'acct_hot', amountCents: 4200, holdMs: 400 };
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        credit((i % 2 === 0 ? main : second).client, 'run_d:call_1', args),
      ),
    );
    const ran = results.filter((r) => r.isError !== true && r._meta?.['oncely/replayed'] !== true);
    const refused = results.filter((r) => r._meta?.['oncely/keyRefusal'] === 'in_progress');
    const replayed = results.filter((r) => r._meta?.['oncely/replayed'] === true);
    expect(ran).toHaveLength(1);
    expect(refused.length + replayed.length).toBe(49);
    expect(runsOf('run_d:call_1')).toHaveLength(1);
    expect(new Set(results.map((_, i) => i % 2)).size).toBe(2);
    const reader = await openKeyStore(keys.url);
    try {
      expect(await reader.lookup('run_d:call_1')).toMatchObject({ status: 'completed', attempt: 1 });
    } finally {
      await reader.close();
    }
  }, 60_000);

  it('a server process killed mid-handler leaves the key started: a restarted server refuses the repeat and its lookup says started', async () => {
    const doomed = await start();
    const pending = credit(doomed.client, 'run_e:call_1', {
      accountId: 'acct_k',
      amountCents: 800,
      holdMs: 60_000,
    }).catch((error: unknown) => error);
    await waitFor(
      'the handler to apply the credit',
      () => Promise.resolve(runsOf('run_e:call_1').length > 0 || undefined),
      30_000,
    );
    doomed.child.kill('SIGKILL');
    await doomed.stop(); // the client gives up the request its server died in
    await pending;
    const restarted = await start();
    const repeat = await credit(restarted.client, 'run_e:call_1', {
      accountId: 'acct_k',
      amountCents: 800,
      holdMs: 60_000,
    });
    expect(repeat.isError).toBe(true);
    expect(repeat._meta).toEqual({ 'oncely/keyRefusal': 'in_progress' });
    expect(textOf(repeat)).toMatch(
      /has not finished \(it is still running, or its process died mid-way\); it is not run again/,
    );
    expect(await keyStatus(restarted.client, 'run_e:call_1', 'issue_credit')).toMatchObject({
      status: 'started',
    });
    expect(runsOf('run_e:call_1')).toHaveLength(1);
  }, 60_000);

  it("settles an oncely run's unknown call through the server's lookup (reconcile: 'server'): one credit, the model told the receipt", async () => {
    const opened = await openTestStore(kind, 'mcp-server-e2e');
    runtimes.defer(() => opened.cleanup());
    const [issueCredit] = await mcpTools(main.client, {
      only: ['issue_credit'],
      reconcile: { issue_credit: 'server' },
      timeoutMs: 300,
    });
    const { agent, model } = scriptedAgent(
      [
        {
          toolCalls: [
            { toolName: 'issue_credit', input: { accountId: 'acct_e2e', amountCents: 700, holdMs: 1_000 } },
          ],
        },
        { text: 'Credited.' },
      ],
      [issueCredit!],
      { onIndeterminate: 'pause' },
    );
    const runtime = runtimes.open(opened.store, [agent], { reconcileEveryMs: 0 });
    const paused = await startAndDrive(runtime, 'credit acct_e2e');
    expect(paused.status).toBe('awaiting_reconciliation');
    const key = keyOf(paused, callIdsOf(paused)[0] ?? '');
    expect((await opened.store.ledger.get(TENANT, key))?.status).toBe('indeterminate');

    // The server's handler finishes after the client gave up; then the sweep asks its lookup.
    await waitFor(
      'the server to complete the key',
      async () => ((await keyStatus(main.client, key)).status === 'completed' ? true : undefined),
      10_000,
    );
    await runtime.sweep();
    const record = await opened.store.ledger.get(TENANT, key);
    expect(record).toMatchObject({ status: 'completed', settledBy: { kind: 'reconcile' } });
    const receipt = (runsOf(key)[0] as { receipt?: string } | undefined)?.receipt;
    expect(record?.result).toEqual({ receipt });
    const done = await runtime.drive(TENANT, paused.runId);
    expect(done.status).toBe('completed');
    expect(JSON.stringify(toolResultsIn(model.received.at(-1)))).toContain(receipt);
    expect(runsOf(key)).toHaveLength(1);
  }, 60_000);
});

describe('onceOnly in one process (the SDK in-memory transport)', () => {
  let file: { path: string; cleanup(): void };
  let store: KeyStore;
  const clients: Client[] = [];
  beforeAll(async () => {
    file = tempSqlitePath('mcp-server-inproc');
    store = await openKeyStore(`sqlite:${file.path}`);
  });
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await store.close();
    file.cleanup();
  });
  const connect = async (server: McpServer): Promise<Client> => {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const client = new Client({ name: 'inproc', version: '1.0.0' });
    await client.connect(clientSide);
    clients.push(client);
    return client;
  };
  const meta = (key: string) => ({ _meta: { 'oncely/idempotencyKey': key } });

  it('with requireKey refuses a call with no key, saying nothing was done; guards tool() and a handler swapped in by update()', async () => {
    let runs = 0;
    const server = onceOnly(new McpServer({ name: 'inproc', version: '1.0.0' }), { store, requireKey: true });
    const registered = server.tool('bump', { by: z.number() }, ({ by }) => {
      runs += by;
      return { content: [{ type: 'text', text: String(runs) }] };
    });
    const client = await connect(server);
    const refused = (await client.callTool({ name: 'bump', arguments: { by: 1 } })) as CallToolResult;
    expect(refused._meta).toEqual({ 'oncely/keyRefusal': 'key_required', 'oncely/notApplied': true });
    expect(runs).toBe(0);
    await client.callTool({ name: 'bump', arguments: { by: 1 }, ...meta('k:1') });
    await client.callTool({ name: 'bump', arguments: { by: 1 }, ...meta('k:1') });
    expect(runs).toBe(1);
    registered.update({
      callback: (args) => {
        runs += (args as { by: number }).by * 10;
        return { content: [{ type: 'text', text: String(runs) }] };
      },
    });
    await client.callTool({ name: 'bump', arguments: { by: 1 }, ...meta('k:2') });
    await client.callTool({ name: 'bump', arguments: { by: 1 }, ...meta('k:2') });
    expect(runs).toBe(11);
    const tooLong = (await client.callTool({
      name: 'bump',
      arguments: { by: 1 },
      ...meta('k'.repeat(256)),
    })) as CallToolResult;
    expect(tooLong._meta?.['oncely/notApplied']).toBe(true);
    expect(runs).toBe(11);
  });

  it('refuses a server whose tools were registered before it, and a tool named as its lookup', () => {
    const early = new McpServer({ name: 'early', version: '1.0.0' });
    early.registerTool('refund', { description: 'refund' }, () => ({ content: [] }));
    expect(() => onceOnly(early, { store })).toThrow(
      /before its tools are registered; already registered, unguarded: refund/,
    );
    const server = onceOnly(new McpServer({ name: 'late', version: '1.0.0' }), { store });
    expect(() => server.registerTool('oncely_key_status', {}, () => ({ content: [] }))).toThrow(
      /onceOnly's lookup/,
    );
    expect(() => onceOnly(server, { store })).toThrow(/already guarded/);
  });

  it("mcpTools never offers the lookup to the model, and refuses reconcile: 'server' for a server without it", async () => {
    const guarded = onceOnly(new McpServer({ name: 'g', version: '1.0.0' }), { store });
    guarded.registerTool('refund', { description: 'refund', inputSchema: { id: z.string() } }, () => ({
      content: [],
    }));
    const tools = await mcpTools(await connect(guarded), { reconcile: { refund: 'server' } });
    expect(tools.map((t) => t.name)).toEqual(['refund']);
    expect(tools[0]?.reconcile).toBeTypeOf('function');
    const plain = new McpServer({ name: 'p', version: '1.0.0' });
    plain.registerTool('refund', { description: 'refund', inputSchema: { id: z.string() } }, () => ({
      content: [],
    }));
    await expect(mcpTools(await connect(plain), { reconcile: { refund: 'server' } })).rejects.toThrow(
      /needs the server's oncely_key_status lookup, which it does not list: guard the server with onceOnly/,
    );
  });
});

describe("reconcile: 'server', what it makes of each answer of the lookup", () => {
  it('completed → the stored result; failed and a recent never-seen → failed; threw, started or an old never-seen → unknown', async () => {
    const file = tempSqlitePath('mcp-server-reconcile');
    const store = await openKeyStore(`sqlite:${file.path}`);
    const server = onceOnly(new McpServer({ name: 'r', version: '1.0.0' }), { store });
    server.registerTool(
      'refund',
      { description: 'refund', inputSchema: { id: z.string(), outcome: z.string().optional() } },
      ({ id, outcome }) => {
        if (outcome === 'throw') throw new Error('gateway reset');
        if (outcome === 'decline')
          return { isError: true, content: [], _meta: { 'oncely/notApplied': true } };
        return { content: [{ type: 'text', text: 'ok' }], structuredContent: { refund: `re_${id}` } };
      },
    );
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const client = new Client({ name: 'r', version: '1.0.0' });
    await client.connect(clientSide);
    try {
      const [refund] = await mcpTools(client, { reconcile: { refund: 'server' } });
      const send = (key: string, args: Record<string, unknown>) =>
        client.callTool({ name: 'refund', arguments: args, _meta: { 'oncely/idempotencyKey': key } });
      await send('run_r:done', { id: '1' });
      await send('run_r:threw', { id: '2', outcome: 'throw' });
      await send('run_r:declined', { id: '3', outcome: 'decline' });
      await store.begin({ key: 'run_r:stuck', fingerprint: 'f', subject: 'refund' });
      const ask = (key: string, startedAgoMs = 1_000) =>
        refund!.reconcile!(
          {
            idempotencyKey: key,
            attemptStartedAt: new Date(Date.now() - startedAgoMs).toISOString(),
          } as never,
          { signal: new AbortController().signal } as never,
        );
      expect(await ask('run_r:done')).toEqual({ status: 'completed', value: { refund: 're_1' } });
      expect(await ask('run_r:declined')).toMatchObject({ status: 'failed' });
      expect(await ask('run_r:never')).toMatchObject({
        status: 'failed',
        reason: 'the server never saw the key',
      });
      expect(await ask('run_r:never', 8 * 24 * 3_600_000)).toMatchObject({
        status: 'unknown',
        reason: expect.stringMatching(/may have forgotten it/) as unknown,
      });
      expect(await ask('run_r:threw')).toMatchObject({
        status: 'unknown',
        reason: expect.stringMatching(/failed mid-way: gateway reset/) as unknown,
      });
      expect(await ask('run_r:stuck')).toMatchObject({
        status: 'unknown',
        reason: expect.stringMatching(/has not finished/) as unknown,
      });
    } finally {
      await client.close();
      await store.close();
      file.cleanup();
    }
  });
});

describe('the MCP server example', () => {
  it('docs/frameworks.md links examples/mcp-server.ts, and it runs as written', () => {
    expect(readFileSync(join(ROOT, 'docs/frameworks.md'), 'utf8')).toContain('examples/mcp-server.ts');
    const output = execFileSync(process.execPath, ['--import', 'tsx', 'examples/mcp-server.ts'], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    expect(output.trim()).toBe('billing_issue_credit completed true completed 1');
  });
});
