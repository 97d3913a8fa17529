import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ROOT, waitFor } from '../support/processes.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';

const CLIENT = join(ROOT, 'test/frameworks/fixtures/mcp-credit-client.ts');

function start(env: Record<string, string>) {
  let output = '';
  const child = spawn(process.execPath, ['--import', 'tsx', CLIENT], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { output: () => output, exited, kill: () => child.kill('SIGKILL') };
}

describe.each(STORE_KINDS)('a process guarding an MCP tool, killed mid call, on %s', (kind) => {
  let opened: OpenedStore;
  let dir: string;
  beforeEach(async () => {
    opened = await openTestStore(kind, 'mcp-crash');
    dir = mkdtempSync(join(tmpdir(), 'oncely-mcp-crash-'));
  });
  afterEach(async () => {
    await opened.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it("restarted, settles the call through its reconcile hook (the server's own lookup): one credit", async () => {
    const books = join(dir, 'books.jsonl');
    const credits = () =>
      existsSync(books)
        ? readFileSync(books, 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((l) => JSON.parse(l) as { tool: string; key: string })
            .filter((e) => e.tool === 'issue_credit')
        : [];
    const env = { DATABASE: opened.url, BOOKS: books };
    const first = start({ ...env, HANG_AFTER_APPLY: '1' });
    await waitFor(
      'the MCP server to apply the credit',
      () => Promise.resolve(credits().length > 0 || undefined),
      30_000,
    );
    first.kill(); // after the effect, before its record
    await first.exited;
    expect((await opened.store.ledger.get('acme', 'mcp-crash:call_1'))?.status).toBe('started');

    const second = start(env);
    expect(await second.exited, second.output()).toBe(0);
    expect(second.output()).toContain('{"status":"completed","settledBy":"reconcile"}');
    expect(credits().map((c) => c.key)).toEqual(['mcp-crash:call_1']);
    const record = await opened.store.ledger.get('acme', 'mcp-crash:call_1');
    expect(record?.status).toBe('completed');
    expect(record?.attempt).toBe(1);
  }, 90_000);
});
