import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { LedgerStatus } from '../../src/ledger/index.js';
import type { RunRecord } from '../../src/run-state/index.js';
import { initialMessages } from '../../src/runs/messages.js';
import { openStore } from '../../src/store/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';
import { OncelyProcess, createKeyWithCli, servingAddress, waitFor } from '../support/processes.js';

/*
 * The life of `oncely serve` and `oncely worker` processes under faults, for real (spawned from the
 * built CLI, real SQLite files, real signals): a tool or reconcile hook that never answers does not
 * hold a stop past its grace; a tools module that hangs, throws or cannot find its packages is a
 * one-line coded error; an API-only server needs no configuration file, and compensates when it
 * loads the tools module.
 */

const TENANT = 'acme';
const KINDS = ['sqlite', 'postgres'] as const;
type Kind = (typeof KINDS)[number];
const GRACE_MS = 1000;
/** A stop takes the grace, then closing the store and a short linger; this is the most it may take. */
const STOP_BOUND_MS = GRACE_MS + 3500;
const fixture = (name: string): string => fileURLToPath(new URL(`fixture/${name}`, import.meta.url));

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (let job = cleanups.pop(); job !== undefined; job = cleanups.pop()) await job();
});

function tempDir(label: string): string {
  const dir = mkdtempSync(join(tmpdir(), `oncely-life-${label}-`));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * A fresh database of this kind, created and migrated here (a deployment's store must exist before
 * `serve` or `worker` opens it); `path` is the SQLite file (undefined on PostgreSQL).
 */
async function freshDatabase(kind: Kind, label: string): Promise<{ path?: string; url: string }> {
  let url: string;
  let path: string | undefined;
  if (kind === 'sqlite') {
    const file = tempSqlitePath(label);
    cleanups.push(() => file.cleanup());
    path = file.path;
    url = `sqlite:${file.path}`;
  } else {
    const db = await createTestDatabase(label);
    cleanups.push(() => db.drop());
    url = db.url;
  }
  await (await openStore(url, { migrate: true })).close();
  return { url, ...(path === undefined ? {} : { path }) };
}

const database = (label: string) => freshDatabase('sqlite', label);

function spawn(args: readonly string[], env: Record<string, string | undefined> = {}, cwd?: string) {
  const proc = new OncelyProcess(args, { ONCELY_GRACE_MS: String(GRACE_MS), ...env }, cwd);
  cleanups.push(() => proc.kill());
  return proc;
}

/** Queues a run straight in the store (the test's connection is closed again before it returns). */
async function queueRun(url: string, agent: string, runId: string): Promise<void> {
  const store = await openStore(url);
  try {
    await store.runs.create({
      tenantId: TENANT,
      runId,
      agent,
      input: 'go',
      checkpoint: { messages: initialMessages('go'), step: 0, pending: null },
    });
  } finally {
    await store.close();
  }
}

async function readStore<T>(url: string, read: (store: Awaited<ReturnType<typeof openStore>>) => Promise<T>) {
  const store = await openStore(url);
  try {
    return await read(store);
  } finally {
    await store.close();
  }
}

async function callStatus(url: string, runId: string): Promise<LedgerStatus | undefined> {
  return readStore(url, async (store) => (await store.ledger.list(TENANT, { runId, limit: 1 }))[0]?.status);
}

async function runOf(url: string, runId: string): Promise<RunRecord | undefined> {
  return readStore(url, (store) => store.runs.get(TENANT, runId));
}

const createKey = (url: string): Promise<string> =>
  createKeyWithCli(url, { tenant: TENANT, actor: 'ops-life', role: 'operator' });

/** SIGTERM, and how the process ended and how long it took. */
async function terminate(
  proc: OncelyProcess,
): Promise<{ code: number | null; signal: string | null; ms: number }> {
  const started = Date.now();
  const exit = await proc.stop(STOP_BOUND_MS + 5000);
  return { ...exit, ms: Date.now() - started };
}

/** SIGTERM: exit 0 within the bound, the stop line logged, the store closed. */
async function expectCleanStop(
  proc: OncelyProcess,
  path: string | undefined,
  stopped: string,
): Promise<void> {
  const exit = await terminate(proc);
  expect(exit, proc.stderr).toMatchObject({ code: 0, signal: null });
  expect(exit.ms).toBeLessThan(STOP_BOUND_MS);
  expect(proc.stderr).toContain(`"msg":"${stopped}"`);
  expect(storeClosed(proc, path)).toBe(true);
}

/** Waits for the file a hung tool or hook of the fixture leaves when it starts. */
function marked(dir: string, name: string): Promise<true> {
  return waitFor(
    `the ${name} to start`,
    () => Promise.resolve(existsSync(join(dir, name)) || undefined),
    20_000,
  );
}

/**
 * The store was let go cleanly: no warning that it did not close, and a SQLite file is left with its
 * write-ahead log checkpointed and removed (a killed process leaves the log behind).
 */
function storeClosed(proc: OncelyProcess, path: string | undefined): boolean {
  if (proc.stderr.includes('the store did not close') || proc.stderr.includes('stopping the store failed'))
    return false;
  return path === undefined || !existsSync(`${path}-wal`);
}

describe.each(KINDS)('SIGTERM stops a process within its grace on %s', (kind) => {
  it('serve: after a tool was abandoned (its promise never settles), exits 0, says stopped, closes the store', async () => {
    const db = await freshDatabase(kind, 'serve_hung');
    const key = await createKey(db.url);
    const proc = spawn(
      ['serve', '-c', fixture('hung.yaml'), '--database-url', db.url, '--port', '0', '--poll-ms', '100'],
      { HUNG_TIMEOUT_MS: '200' },
    );
    const base = await servingAddress(proc);
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const created = await fetch(`${base}/v1/runs`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ agent: 'hangs', input: 'go', run_id: 'run_serve_hung' }),
    });
    expect(created.status).toBe(201);
    const run = await waitFor(
      'the run to end with its call unknown',
      async () => {
        const r = (await (await fetch(`${base}/v1/runs/run_serve_hung`, { headers })).json()) as {
          status: string;
          error: { code: string } | null;
        };
        return r.status === 'failed' ? r : undefined;
      },
      20_000,
      100,
    );
    expect(run.error?.code).toBe('RUN_CALL_UNKNOWN');

    await expectCleanStop(proc, db.path, 'stopped');
    expect(await callStatus(db.url, 'run_serve_hung')).toBe('indeterminate');
  });

  it('worker: a tool still running (its timeout a minute away) is let go after the grace; exit 0, store closed', async () => {
    const db = await freshDatabase(kind, 'worker_hung');
    const marks = tempDir('marks');
    await queueRun(db.url, 'hangs', 'run_worker_hung');
    const proc = spawn(['worker', '-c', fixture('hung.yaml'), '--database-url', db.url, '--poll-ms', '100'], {
      HUNG_TIMEOUT_MS: '60000',
      MARK_DIR: marks,
    });
    await marked(marks, 'tool');

    await expectCleanStop(proc, db.path, 'worker stopped');
    expect(proc.stderr).toContain('not finished within the grace');
    // Nobody knows whether the credit went out: the record stays unknown — `started`, or
    // `indeterminate` when the aborted attempt's outcome was written before the store closed; its
    // deadline unchanged either way (it may still land). The run is released for another worker to
    // claim now (not when its lease expires), which waits for that deadline.
    expect(proc.stderr).toContain('released 1 run(s) still in flight');
    expect(['started', 'indeterminate']).toContain(await callStatus(db.url, 'run_worker_hung'));
    const run = await runOf(db.url, 'run_worker_hung');
    expect(run).toMatchObject({ status: 'queued', leaseOwner: null });
    const events = await readStore(db.url, (store) => store.runs.events(TENANT, 'run_worker_hung', 0, 100));
    expect(events.at(-1)).toMatchObject({
      type: 'run.status',
      data: { status: 'queued', cause: 'shutdown' },
    });
  });

  it('worker: SIGTERM lets the step in flight finish, hands the run over between steps, and another worker claims it at once', async () => {
    const db = await freshDatabase(kind, 'worker_handoff');
    const marks = tempDir('marks');
    const books = join(marks, 'books.jsonl');
    const env = { MARK_DIR: marks, BOOKS: books, SLOW_MS: '1500' };
    const args = ['worker', '-c', fixture('hung.yaml'), '--database-url', db.url, '--poll-ms', '100'];
    // Two workers, both idle before the run is queued; the one that claims it is told to stop while
    // its first call is in flight. Its lease would hold the run for 30 s (the default).
    const workers = [
      spawn([...args, '--grace-ms', '20000'], env),
      spawn([...args, '--grace-ms', '20000'], env),
    ];
    for (const w of workers) {
      await waitFor(
        'the workers to start',
        () => Promise.resolve(w.stderr.includes('worker started') || undefined),
        20_000,
      );
    }
    await queueRun(db.url, 'slow', 'run_handoff');
    await marked(marks, 'slow-acct_3');
    const first = workers.find((w) => w.stderr.includes('claimed run'));
    const second = workers.find((w) => w !== first);
    if (first === undefined || second === undefined) throw new Error('no worker claimed the run');

    const exit = await first.stop(30_000);
    expect(exit, first.stderr).toMatchObject({ code: 0, signal: null });
    const stoppedAt = Date.now();
    expect(first.stderr).toContain('handed the run over between steps');
    expect(first.stderr).not.toContain('not finished within the grace');

    // Taken at once, long before the first worker's lease would have expired.
    await waitFor(
      'the second worker to claim the run',
      () => Promise.resolve(second.stderr.includes('claimed run') || undefined),
      10_000,
      50,
    );
    expect(Date.now() - stoppedAt).toBeLessThan(10_000);
    const run = await waitFor(
      'the run to complete',
      async () => {
        const r = await runOf(db.url, 'run_handoff');
        return r?.status === 'completed' ? r : undefined;
      },
      30_000,
      100,
    );
    expect(run.checkpoint.messages.at(-1)).toMatchObject({ role: 'assistant' });
    // The first step's credit was applied by the first worker, the second's by the second: one each.
    const credits = readFileSync(books, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { key: string; pid: number });
    expect(credits.map((c) => c.pid)).toEqual([first.pid, second.pid]);
    expect(new Set(credits.map((c) => c.key)).size).toBe(2);
    const events = await readStore(db.url, (store) => store.runs.events(TENANT, 'run_handoff', 0, 100));
    expect(events.filter((e) => (e.data as { cause?: string }).cause === 'shutdown')).toHaveLength(1);
  });
});

describe('SIGTERM, whatever a reconcile hook does', () => {
  it('worker: a reconcile hook that never answers (its timeout a minute away) does not hold the stop', async () => {
    const db = await database('worker_hung_hook');
    const marks = tempDir('marks');
    await queueRun(db.url, 'hung-hook', 'run_hung_hook');
    const proc = spawn(['worker', '-c', fixture('hung.yaml'), '--database-url', db.url, '--poll-ms', '100'], {
      HUNG_TIMEOUT_MS: '60000',
      MARK_DIR: marks,
    });
    await marked(marks, 'hook');

    await expectCleanStop(proc, db.path, 'worker stopped');
    expect(await callStatus(db.url, 'run_hung_hook')).toBe('indeterminate');
  });

  it('a second signal still exits at once, during a long grace', async () => {
    const db = await database('worker_twice');
    const marks = tempDir('marks');
    await queueRun(db.url, 'hangs', 'run_twice');
    const proc = spawn(
      [
        'worker',
        '-c',
        fixture('hung.yaml'),
        '--database-url',
        db.url,
        '--poll-ms',
        '100',
        '--grace-ms',
        '60000',
      ],
      { HUNG_TIMEOUT_MS: '60000', MARK_DIR: marks },
    );
    await marked(marks, 'tool');
    proc.child.kill('SIGTERM');
    await waitFor(
      'the stop to begin',
      () => Promise.resolve(proc.stderr.includes('stopping') || undefined),
      10_000,
    );
    const started = Date.now();
    proc.child.kill('SIGTERM');
    expect(await proc.exit(5000)).toEqual({ code: 130, signal: null });
    expect(Date.now() - started).toBeLessThan(3000);
    expect(proc.stderr).toContain('second signal');
  });
});

describe('a tools module that cannot be loaded is a one-line CONFIG_INVALID', () => {
  /** `oncely worker` in `dir` (its oncely.yaml) to its end: the exit code and standard error. */
  async function worker(args: readonly string[], env: Record<string, string> = {}, cwd?: string) {
    const db = await database('tools');
    const proc = spawn(['worker', '--database-url', db.url, ...args], env, cwd);
    const started = Date.now();
    const exit = await proc.exit(20_000);
    return { ...exit, ms: Date.now() - started, stderr: proc.stderr };
  }

  function configIn(dir: string, tools: string, body: string): string {
    writeFileSync(join(dir, 'tools.mjs'), body);
    const file = join(dir, 'oncely.yaml');
    writeFileSync(file, `tools: ${tools}\n`);
    return file;
  }

  it('a top-level await that never settles: refused after the bounded wait, naming the module', async () => {
    const dir = tempDir('tla');
    const config = configIn(dir, './tools.mjs', 'await new Promise(() => undefined);\nexport const x = 1;\n');
    const ran = await worker(['-c', config], { ONCELY_TOOLS_IMPORT_TIMEOUT_MS: '300' });
    expect(ran.code, ran.stderr).toBe(1);
    expect(ran.ms).toBeLessThan(10_000);
    expect(ran.stderr.trim().split('\n')).toHaveLength(1);
    expect(ran.stderr).toMatch(/^oncely: CONFIG_INVALID: /);
    expect(ran.stderr).toContain(`${join(dir, 'tools.mjs')}: it did not finish importing within 300 ms`);
    expect(ran.stderr).toContain('ONCELY_TOOLS_IMPORT_TIMEOUT_MS');
  });

  it('a top-level await that never settles while it holds a socket open: refused, and the process exits', async () => {
    const dir = tempDir('tla_socket');
    // A connection made at top level to a server that never answers: the socket keeps the event loop
    // alive, so the refused start must still end the process.
    const body = [
      "import { connect, createServer } from 'node:net';",
      'const server = createServer(() => undefined);',
      "await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));",
      "const socket = connect(server.address().port, '127.0.0.1');",
      "await new Promise((resolve) => socket.once('data', resolve));",
      'export const x = 1;',
      '',
    ].join('\n');
    const config = configIn(dir, './tools.mjs', body);
    const ran = await worker(['-c', config], { ONCELY_TOOLS_IMPORT_TIMEOUT_MS: '300' });
    expect(ran.code, ran.stderr).toBe(1);
    expect(ran.ms).toBeLessThan(10_000);
    expect(ran.stderr).toMatch(/^oncely: CONFIG_INVALID: /);
    expect(ran.stderr).toContain(`${join(dir, 'tools.mjs')}: it did not finish importing within 300 ms`);
  });

  it('a module that throws on import: its message on one line, no stack', async () => {
    const ran = await worker(['-c', fixture('throws.yaml')]);
    expect(ran.code, ran.stderr).toBe(1);
    const lines = ran.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^oncely: CONFIG_INVALID: .*throws\.yaml:\d+:\d+: tools: /);
    expect(lines[0]).toContain(
      `cannot import the tools module ${fixture('throws-tools.mjs')}: it threw: ZodError:`,
    );
    expect(lines[0]).toContain('BILLING_URL');
    expect(ran.stderr).not.toMatch(/\n\s+at /);
  });

  it('a module outside any project, which cannot find zod or oncely: says to install them where it lives', async () => {
    const dir = tempDir('nozod');
    const config = configIn(
      dir,
      './tools.mjs',
      "import { z } from 'zod';\nimport { defineTool, read } from 'oncely';\n" +
        "export const t = defineTool({ name: 't', description: 't', input: z.object({}), effect: read(), execute: () => 1 });\n",
    );
    const ran = await worker(['-c', config]);
    expect(ran.code, ran.stderr).toBe(1);
    expect(ran.stderr.trim().split('\n')).toHaveLength(1);
    expect(ran.stderr).toMatch(/^oncely: CONFIG_INVALID: /);
    expect(ran.stderr).toContain(`${join(dir, 'tools.mjs')}: it cannot find the package "zod"`);
    expect(ran.stderr).toContain(`cd ${dir} && npm install oncely zod`);
  });
});

describe('an API-only oncely serve', () => {
  it('runs with a database URL and no configuration file; a serve with a worker and no agents is refused', async () => {
    const db = await database('api_only');
    const cwd = tempDir('no-config');
    const key = await createKey(db.url);
    const proc = spawn(['serve', '--no-worker', '--database-url', db.url, '--port', '0'], {}, cwd);
    const base = await servingAddress(proc);
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    const list = await fetch(`${base}/v1/tool-executions`, { headers: { authorization: `Bearer ${key}` } });
    expect(list.status).toBe(200);
    expect(((await list.json()) as { items: unknown[] }).items).toEqual([]);
    expect(proc.stderr).toContain(
      'no tools module: compensate and reconcile hooks are not available from this server',
    );
    expect(await terminate(proc)).toMatchObject({ code: 0, signal: null });

    const named = spawn(
      ['serve', '--no-worker', '-c', 'missing.yaml', '--database-url', db.url, '--port', '0'],
      {},
      cwd,
    );
    expect((await named.exit(20_000)).code).toBe(1);
    expect(named.stderr).toContain('CONFIG_INVALID: cannot read the configuration file missing.yaml');
    expect(named.stderr).toContain('it does not exist');

    const driving = spawn([
      'serve',
      '-c',
      fixture('tools-only.yaml'),
      '--database-url',
      db.url,
      '--port',
      '0',
    ]);
    expect((await driving.exit(20_000)).code).toBe(1);
    expect(driving.stderr).toMatch(/^oncely: CONFIG_INVALID: .*tools-only\.yaml defines no agents/);
    expect(driving.stderr).toContain('--no-worker');
  });

  it('compensates when it loads the tools module, and without it says what to do', async () => {
    const db = await database('api_compensate');
    await queueRun(db.url, 'credit-agent', 'run_credit');
    const worker = spawn([
      'worker',
      '-c',
      fixture('oncely.yaml'),
      '--database-url',
      db.url,
      '--poll-ms',
      '100',
    ]);
    await waitFor(
      'the worker to complete the credit',
      async () => ((await runOf(db.url, 'run_credit'))?.status === 'completed' ? true : undefined),
      20_000,
      100,
    );
    expect(await terminate(worker)).toMatchObject({ code: 0, signal: null });
    const callKey = await readStore(
      db.url,
      async (store) =>
        (await store.ledger.list(TENANT, { runId: 'run_credit', limit: 1 }))[0]!.idempotencyKey,
    );
    const key = await createKey(db.url);
    const compensate = async (base: string) => {
      const answer = await fetch(`${base}/v1/tool-executions/${callKey}/compensate`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ reason: 'credited the wrong account' }),
      });
      return { status: answer.status, body: (await answer.json()) as Record<string, unknown> };
    };

    const bare = spawn(
      ['serve', '--no-worker', '--database-url', db.url, '--port', '0'],
      {},
      tempDir('bare'),
    );
    const refused = await compensate(await servingAddress(bare));
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ error: { code: 'LEDGER_NOT_COMPENSABLE' } });
    expect(JSON.stringify(refused.body)).toContain('loads the tools module exporting \\"issue_credit\\"');
    expect(await terminate(bare)).toMatchObject({ code: 0, signal: null });

    const api = spawn([
      'serve',
      '--no-worker',
      '-c',
      fixture('tools-only.yaml'),
      '--database-url',
      db.url,
      '--port',
      '0',
    ]);
    const done = await compensate(await servingAddress(api));
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(done.body).toMatchObject({ status: 'compensated', record: { status: 'compensated' } });
    expect(api.stderr).not.toContain('no tools module');
    expect(await terminate(api)).toMatchObject({ code: 0, signal: null });
    expect(
      await readStore(
        db.url,
        async (store) => (await store.ledger.get(TENANT, `${callKey}:compensation`))?.status,
      ),
    ).toBe('completed');
  });
});
