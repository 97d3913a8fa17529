import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, rmSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { isOncelyError } from '../../src/errors/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { FILE_CHECK_MS, SqliteStore } from '../../src/store/sqlite/index.js';
import { asStoreError } from '../../src/store/sqlite/sqlite-errors.js';
import { startWorker } from '../../src/worker/index.js';
import { errorResponse } from '../../src/api/http-errors.js';
import { latestVersion, loadMigrations } from '../../src/store/migrations.js';
import { tempSqlitePath } from '../support/databases.js';
import { startOwnPostgres } from '../support/own-postgres.js';
import { OncelyProcess, ROOT, createKeyWithCli } from '../support/processes.js';
import { ApiHarness, TENANT } from './support/harness.js';

/** Another process that takes the SQLite write lock and holds it for `ms`. */
async function holdWriteLock(
  path: string,
  ms: number,
): Promise<{ child: ChildProcess; released: Promise<void> }> {
  const script = `
    const Database = require('better-sqlite3');
    const db = new Database(process.argv[1]);
    db.exec('BEGIN IMMEDIATE');
    process.stdout.write('locked\\n');
    setTimeout(() => { db.exec('COMMIT'); db.close(); process.stdout.write('released\\n'); }, Number(process.argv[2]));`;
  const child = spawn(process.execPath, ['-e', script, path, String(ms)], { cwd: ROOT, stdio: 'pipe' });
  let out = '';
  // Resolves when the holder let go of the lock, or died (a test's cleanup kills it).
  const released = new Promise<void>((resolve) => {
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      if (out.includes('released')) resolve();
    });
    child.once('exit', () => resolve());
  });
  for (let i = 0; i < 200 && !out.includes('locked'); i++) await sleep(25);
  if (!out.includes('locked')) throw new Error('the lock holder never took the lock');
  return { child, released };
}

function timed<T>(work: () => Promise<T>): Promise<{ ms: number; value: T }> {
  const started = performance.now();
  return work().then((value) => ({ ms: performance.now() - started, value }));
}

describe('store faults, answered honestly', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (let job = cleanups.pop(); job !== undefined; job = cleanups.pop()) await job();
  });

  it('SQLite: another process holding the write lock for 10 s stalls nothing; writes wait for it, reads do not', async () => {
    const h = await ApiHarness.start('sqlite');
    cleanups.push(() => h.close());
    // A worker polls for runs every 50 ms: each poll is a write that must wait for the lock.
    const worker = startWorker(h.runtime, { concurrency: 1, pollMs: 50 });
    cleanups.push(() => worker.stop());
    const path = h.url.slice('sqlite:'.length);
    const holder = await holdWriteLock(path, 10_000);
    cleanups.push(() => {
      holder.child.kill('SIGKILL');
    });
    const lockedAt = performance.now();

    const ready = await timed(() => h.request('GET', '/readyz'));
    expect(ready.value.status).toBe(503);
    expect(ready.value.body).toMatchObject({ error: { code: 'STORE_UNAVAILABLE' } });
    expect(ready.value.headers.get('retry-after')).toBe('5');
    expect(ready.ms).toBeLessThan(4_000);

    // A write waits for the lock without holding up the process.
    const start = h.request('POST', '/v1/runs', {
      key: h.keys.operator,
      body: { agent: 'credit-agent', input: 'go', run_id: 'run_locked_1' },
    });
    const health: number[] = [];
    const reads: number[] = [];
    while (performance.now() - lockedAt < 8_000) {
      health.push((await timed(() => h.request('GET', '/healthz'))).ms);
      const list = await timed(() => h.request('GET', '/v1/runs', { key: h.keys.viewer }));
      expect(list.value.status).toBe(200);
      reads.push(list.ms);
      await sleep(100);
    }
    const p95 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.95)]!;
    expect(health.length).toBeGreaterThan(20);
    expect(p95(health), `healthz: ${health.map(Math.round).join(' ')}`).toBeLessThan(100);
    expect(Math.max(...health)).toBeLessThan(1_000);
    expect(p95(reads), `reads: ${reads.map(Math.round).join(' ')}`).toBeLessThan(100);

    await holder.released;
    const created = await start;
    expect(created.status, created.text).toBe(201);
    expect((await h.store.runs.get(TENANT, 'run_locked_1'))?.runId).toBe('run_locked_1');
  }, 30_000);

  it('SQLite: a write whose lock another process holds past the wait answers 503 STORE_UNAVAILABLE, changing nothing', async () => {
    const file = tempSqlitePath('lock_wait');
    cleanups.push(() => file.cleanup());
    const store = await SqliteStore.open(file.path, { lockWaitMs: 300 });
    cleanups.push(() => store.close());
    await store.migrate();
    const holder = await holdWriteLock(file.path, 2_000);
    cleanups.push(() => {
      holder.child.kill('SIGKILL');
    });
    const refused = await store.runs.create(newRun('run_x')).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isOncelyError(refused, 'STORE_UNAVAILABLE')).toBe(true);
    expect(String((refused as Error).message)).toMatch(/stayed locked by another process/);
    const answer = errorResponse(refused);
    expect(answer.status).toBe(503);
    await holder.released;
    expect(await store.runs.get(TENANT, 'run_x')).toBeUndefined();
  });

  it("SQLite: ONCELY_SQLITE_LOCK_WAIT_MS sets the wait for another process's lock; a bad value is refused", async () => {
    const file = tempSqlitePath('lock_wait_env');
    cleanups.push(() => file.cleanup());
    const before = process.env.ONCELY_SQLITE_LOCK_WAIT_MS;
    cleanups.push(() => {
      if (before === undefined) delete process.env.ONCELY_SQLITE_LOCK_WAIT_MS;
      else process.env.ONCELY_SQLITE_LOCK_WAIT_MS = before;
    });
    process.env.ONCELY_SQLITE_LOCK_WAIT_MS = 'soon';
    await expect(openStore(`sqlite:${file.path}`)).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    process.env.ONCELY_SQLITE_LOCK_WAIT_MS = '200';
    const store = await openStore(`sqlite:${file.path}`);
    cleanups.push(() => store.close());
    const holder = await holdWriteLock(file.path, 3_000);
    cleanups.push(() => {
      holder.child.kill('SIGKILL');
    });
    const started = Date.now();
    await expect(store.runs.create(newRun('run_env'))).rejects.toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('SQLite: a full disk is STORE_UNAVAILABLE saying so, not a raw SqliteError', () => {
    const file = tempSqlitePath('full');
    cleanups.push(() => file.cleanup());
    const db = new Database(file.path);
    cleanups.push(() => {
      db.close();
    });
    db.exec('CREATE TABLE t (x BLOB)');
    db.pragma('max_page_count = 4');
    let raw: unknown;
    try {
      db.prepare('INSERT INTO t VALUES (?)').run(Buffer.alloc(64 * 1024));
    } catch (error) {
      raw = error;
    }
    expect((raw as { code?: string }).code).toBe('SQLITE_FULL');
    const mapped = asStoreError(raw, file.path);
    expect(isOncelyError(mapped, 'STORE_UNAVAILABLE')).toBe(true);
    expect((mapped as Error).message).toContain('is full');
    expect(errorResponse(mapped).status).toBe(503);
  });

  it('SQLite: a file deleted under a running server is refused (STORE_FILE_REPLACED), and a restart does not start an empty ledger', async () => {
    const h = await ApiHarness.start('sqlite');
    cleanups.push(() => h.close());
    const path = h.url.slice('sqlite:'.length);
    const runId = await h.drivenRun('credit-agent');
    expect(h.fixtures.downstream.credits).toHaveLength(1);
    expect((await h.request('GET', '/readyz')).status).toBe(200);

    for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });

    const ready = await h.request('GET', '/readyz');
    expect(ready.status).toBe(503);
    expect(ready.body).toMatchObject({ error: { code: 'STORE_FILE_REPLACED' } });
    const read = await h.request('GET', `/v1/runs/${runId}`, { key: h.keys.viewer });
    expect(read.status).toBe(503);
    expect(read.body).toMatchObject({ error: { code: 'STORE_FILE_REPLACED' } });
    // The same run asked for again: refused, so nothing pays a second time.
    const again = await h.request('POST', '/v1/runs', {
      key: h.keys.operator,
      body: { agent: 'credit-agent', input: 'go', run_id: runId },
    });
    expect(again.status).toBe(503);
    expect(again.body).toMatchObject({ error: { code: 'STORE_FILE_REPLACED' } });
    await expect(h.runtime.drive(TENANT, runId)).rejects.toMatchObject({ code: 'STORE_FILE_REPLACED' });
    expect(h.fixtures.downstream.credits).toHaveLength(1);
    expect(existsSync(path)).toBe(false);

    // A deployment's restart (`create: false`, as serve and worker open it) refuses the missing file.
    await expect(openStore(h.url, { create: false })).rejects.toMatchObject({ code: 'STORE_NOT_FOUND' });
    expect(existsSync(path)).toBe(false);
    // A file someone put there with no ledger in it is refused too.
    writeFileSync(path, '');
    await expect(openStore(h.url, { create: false })).rejects.toMatchObject({ code: 'STORE_NOT_FOUND' });
  });

  it('SQLite: a file replaced by another one (same path, new inode) is refused', async () => {
    const file = tempSqlitePath('replaced');
    cleanups.push(() => file.cleanup());
    const store = await openStore(`sqlite:${file.path}`);
    cleanups.push(() => store.close());
    const other = tempSqlitePath('replacement');
    cleanups.push(() => other.cleanup());
    await (await openStore(`sqlite:${other.path}`)).close();
    rmSync(file.path);
    writeFileSync(file.path, Buffer.from(new Database(other.path).serialize()));
    await expect(store.probe()).rejects.toMatchObject({ code: 'STORE_FILE_REPLACED' });
    await expect(store.runs.get(TENANT, 'run_1')).rejects.toMatchObject({ code: 'STORE_FILE_REPLACED' });
  });

  it('SQLite: a file replaced under a running store is seen by the first operation a second after the last check, with no probe, and refused from then on', async () => {
    const file = tempSqlitePath('replaced_timed');
    cleanups.push(() => file.cleanup());
    const store = await openStore(`sqlite:${file.path}`);
    cleanups.push(() => store.close());
    await store.runs.create(newRun('run_before'));
    const other = tempSqlitePath('replacement_timed');
    cleanups.push(() => other.cleanup());
    await (await openStore(`sqlite:${other.path}`)).close();
    for (const suffix of ['', '-wal', '-shm']) rmSync(`${file.path}${suffix}`, { force: true });
    writeFileSync(file.path, Buffer.from(new Database(other.path).serialize()));

    await sleep(FILE_CHECK_MS + 500);
    await expect(store.runs.create(newRun('run_after'))).rejects.toMatchObject({
      code: 'STORE_FILE_REPLACED',
    });
    await expect(store.runs.get(TENANT, 'run_before')).rejects.toMatchObject({ code: 'STORE_FILE_REPLACED' });
    // Nothing reached the file now at the path.
    const there = new Database(file.path, { readonly: true });
    try {
      expect(there.prepare('SELECT COUNT(*) AS n FROM runs').get()).toEqual({ n: 0 });
    } finally {
      there.close();
    }
  });

  it('SQLite: a schema migrated past this code under a running store refuses writes with SCHEMA_TOO_NEW', async () => {
    const file = tempSqlitePath('too_new');
    cleanups.push(() => file.cleanup());
    const store = await openStore(`sqlite:${file.path}`);
    cleanups.push(() => store.close());
    await bumpSchema(store, file.path);
    await expect(store.runs.create(newRun('run_new'))).rejects.toMatchObject({ code: 'SCHEMA_TOO_NEW' });
    expect(await store.runs.get(TENANT, 'run_new')).toBeUndefined();
  });

  it('SQLite: open failures are coded one-liners: not a database, read-only, missing with create off', async () => {
    const file = tempSqlitePath('not_a_db');
    cleanups.push(() => file.cleanup());
    writeFileSync(file.path, 'this is not a database, it is a shopping list\n'.repeat(100));
    const notDb = await SqliteStore.open(file.path).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(notDb).toMatchObject({ code: 'STORE_UNAVAILABLE' });
    expect((notDb as Error).message).toContain('is not a SQLite database');

    const readOnly = tempSqlitePath('read_only');
    cleanups.push(() => readOnly.cleanup());
    new Database(readOnly.path).close();
    chmodSync(readOnly.path, 0o444);
    if (process.getuid?.() !== 0) {
      // root writes a read-only file all the same; everyone else gets a coded refusal.
      const refused = await openStore(`sqlite:${readOnly.path}`).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(refused).toMatchObject({ code: 'STORE_UNAVAILABLE' });
      expect((refused as Error).message).toContain('read-only');
    }

    const missing = tempSqlitePath('missing');
    await expect(SqliteStore.open(missing.path, { create: false })).rejects.toMatchObject({
      code: 'STORE_NOT_FOUND',
    });
    expect(existsSync(missing.path)).toBe(false);
  });

  it('the CLI: `keys list` reads while another process holds the write lock; `migrate --check` never creates a file', async () => {
    const file = tempSqlitePath('cli_locked');
    cleanups.push(() => file.cleanup());
    const url = `sqlite:${file.path}`;
    await createKeyWithCli(url, { tenant: TENANT, actor: 'ops', role: 'viewer' }, { create: true });
    const holder = await holdWriteLock(file.path, 20_000);
    cleanups.push(() => {
      holder.child.kill('SIGKILL');
    });
    const started = Date.now();
    const list = new OncelyProcess(['keys', 'list', '--tenant', TENANT, '--database-url', url], {});
    expect((await list.exit(10_000)).code, list.stderr).toBe(0);
    expect(list.stdout).toContain('ops');
    expect(Date.now() - started).toBeLessThan(10_000);
    holder.child.kill('SIGKILL');

    const missing = tempSqlitePath('cli_missing');
    const check = new OncelyProcess(['migrate', '--check', '--database-url', `sqlite:${missing.path}`], {});
    expect((await check.exit(20_000)).code).toBe(1);
    expect(check.stdout).toContain('no database there');
    expect(existsSync(missing.path)).toBe(false);
  }, 60_000);

  it('PostgreSQL stopped under a running server: every route answers 503 STORE_UNAVAILABLE with Retry-After, and nothing changes', async () => {
    const own = await startOwnPostgres('outage');
    cleanups.push(() => own.destroy());
    const h = await ApiHarness.start('postgres', {
      database: { url: own.url, drop: () => Promise.resolve() },
    });
    cleanups.push(() => h.close());
    const created = await h.request('POST', '/v1/runs', {
      key: h.keys.operator,
      body: { agent: 'credit-agent', input: 'go', run_id: 'run_before' },
    });
    expect(created.status).toBe(201);
    const before = await h.snapshot();

    await own.stop();
    const answers = {
      list: await h.request('GET', '/v1/runs', { key: h.keys.viewer }),
      start: await h.request('POST', '/v1/runs', {
        key: h.keys.operator,
        body: { agent: 'credit-agent', input: 'go', run_id: 'run_during' },
      }),
      metrics: await h.request('GET', '/metrics'),
      ready: await h.request('GET', '/readyz'),
      calls: await h.request('GET', '/v1/tool-executions', { key: h.keys.viewer }),
    };
    for (const [route, answer] of Object.entries(answers)) {
      expect(answer.status, `${route}: ${answer.text}`).toBe(503);
      expect(answer.body, route).toMatchObject({ error: { code: 'STORE_UNAVAILABLE' } });
      expect(answer.headers.get('retry-after'), route).toBe('5');
      expect(answer.text, route).not.toMatch(/ECONNREFUSED.*\n\s+at /);
    }

    await own.start();
    const back = await pollUntil(async () => (await h.request('GET', '/readyz')).status === 200);
    expect(back).toBe(true);
    expect(await h.snapshot()).toBe(before);
  }, 60_000);

  it('PostgreSQL: a schema migrated past this code under a running store refuses writes once seen', async () => {
    const own = await startOwnPostgres('too_new');
    cleanups.push(() => own.destroy());
    const store = await openStore(own.url, { migrate: true });
    cleanups.push(() => store.close());
    await bumpSchema(store, own.url);
    // Readiness looks at once; without it the store notices within 5 s.
    await expect(store.probe()).rejects.toMatchObject({ code: 'SCHEMA_TOO_NEW' });
    await expect(store.runs.create(newRun('run_new'))).rejects.toMatchObject({ code: 'SCHEMA_TOO_NEW' });
    expect(await store.runs.get(TENANT, 'run_new')).toBeUndefined();
  }, 60_000);
});

function newRun(runId: string) {
  return {
    tenantId: TENANT,
    runId,
    agent: 'a',
    input: 'go',
    checkpoint: { messages: [], step: 0, pending: null },
  };
}

/** Another process's `oncely migrate` from a newer oncely: one version past what this code knows. */
async function bumpSchema(store: Store, where: string): Promise<void> {
  const next = latestVersion(loadMigrations(store.dialect)) + 1;
  if (store.dialect === 'sqlite') {
    const db = new Database(where);
    try {
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
        next,
        'from_the_future',
        new Date().toISOString(),
      );
      db.exec('CREATE TABLE from_the_future (x INTEGER)');
    } finally {
      db.close();
    }
    return;
  }
  const client = new pg.Client({ connectionString: where });
  await client.connect();
  try {
    await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
      next,
      'from_the_future',
    ]);
  } finally {
    await client.end();
  }
}

async function pollUntil(check: () => Promise<boolean>, ms = 15_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await sleep(200);
  }
  return false;
}
