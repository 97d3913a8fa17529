import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';
import { OncelyProcess, createKeyWithCli, servingAddress, waitFor } from '../support/processes.js';

const CONFIG = fileURLToPath(new URL('./fixture/oncely.yaml', import.meta.url));

/** `oncely serve` on an ephemeral port; resolves once it logged where it listens. */
async function serve(
  databaseUrl: string,
  extra: string[] = [],
): Promise<{ proc: OncelyProcess; base: string }> {
  const proc = new OncelyProcess(
    ['serve', '--config', CONFIG, '--database-url', databaseUrl, '--port', '0', '--poll-ms', '100', ...extra],
    { ONCELY_LOG_LEVEL: 'info' },
  );
  const base = await servingAddress(proc);
  return { proc, base };
}

/** The keys of a JSON object's top level, in order, repeats kept (JSON.parse would keep the last). */
function topLevelKeys(json: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  for (let i = 0; i < json.length; i++) {
    const c = json[i];
    if (c === '"') {
      const end = /^"(?:[^"\\]|\\.)*"/.exec(json.slice(i))?.[0] ?? '"';
      if (depth === 1 && json[i + end.length] === ':') keys.push(JSON.parse(end) as string);
      i += end.length - 1;
    } else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') depth--;
  }
  return keys;
}

const createKey = (databaseUrl: string, role: string): Promise<string> =>
  createKeyWithCli(databaseUrl, { tenant: 'acme', actor: 'ops-e2e', role });

describe('oncely serve', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (let job = cleanups.pop(); job !== undefined; job = cleanups.pop()) await job();
  });

  it('serves the API with a worker in the same process, and stops cleanly on SIGTERM', async () => {
    const file = tempSqlitePath('serve');
    cleanups.push(() => Promise.resolve(file.cleanup()));
    const url = `sqlite:${file.path}`;
    // A first run: --create makes the database.
    const { proc, base } = await serve(url, ['--create']);
    cleanups.push(() => proc.kill());
    const key = await createKey(url, 'operator');
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };

    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    const created = await fetch(`${base}/v1/runs`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ agent: 'credit-agent', input: 'credit acct_1 $25', run_id: 'run_e2e_1' }),
    });
    expect(created.status).toBe(201);
    const done = await waitFor(
      'the in-process worker to finish the run',
      async () => {
        const run = (await (await fetch(`${base}/v1/runs/run_e2e_1`, { headers })).json()) as {
          status: string;
        };
        return run.status === 'completed' ? run : undefined;
      },
      20_000,
      100,
    );
    expect(done).toMatchObject({ status: 'completed', result: { text: 'Credited.' } });
    const calls = (await (
      await fetch(`${base}/v1/tool-executions?status=completed`, { headers })
    ).json()) as {
      items: { idempotency_key: string; tool_name: string }[];
    };
    expect(calls.items).toHaveLength(1);
    expect(calls.items[0]?.tool_name).toBe('issue_credit');
    const metrics = await (await fetch(`${base}/metrics`)).text();
    expect(metrics).toMatch(/^oncely_runs\{status="completed"\} 1$/m);
    expect(metrics).toMatch(/^oncely_tool_call_records\{tool="issue_credit",status="completed"\} 1$/m);
    expect(metrics).toMatch(
      /^oncely_ledger_operation_duration_seconds_count\{operation="reserve_step",outcome="ok"\} [1-9]/m,
    );
    // What this process wrote: the call reserved (started), then completed; the requests it answered.
    expect(metrics).toMatch(/^oncely_tool_calls_total\{tool="issue_credit",status="started"\} 1$/m);
    expect(metrics).toMatch(/^oncely_tool_calls_total\{tool="issue_credit",status="completed"\} 1$/m);
    expect(metrics).toMatch(
      /^oncely_http_requests_total\{method="POST",route="\/v1\/runs",status="201"\} 1$/m,
    );
    expect(metrics).toMatch(
      /^oncely_http_request_duration_seconds_count\{method="GET",route="\/v1\/runs\/:run_id",status="200"\} [1-9]/m,
    );
    // Node's process metrics under their usual names.
    expect(metrics).toMatch(/^process_cpu_user_seconds_total \d/m);
    expect(metrics).not.toContain('oncely_process_');

    const exit = await proc.stop(20_000);
    expect(exit, proc.stderr).toEqual({ code: 0, signal: null });
    expect(proc.stderr).toContain('"msg":"stopped"');
    const logged = proc.stderr.split('\n').filter((l) => l.includes('"runId":"run_e2e_1"'));
    // One name per concept, as the worker's lines have them, and no key twice in a line.
    expect(logged.some((l) => l.includes('"actorId":"ops-e2e"') && l.includes('"tenantId":"acme"'))).toBe(
      true,
    );
    for (const line of proc.stderr.split('\n').filter((l) => l.startsWith('{'))) {
      const keys = topLevelKeys(line);
      expect(
        keys.filter((k, i) => keys.indexOf(k) !== i),
        line,
      ).toEqual([]);
    }
  });

  it('with --no-worker serves the API only: a new run stays queued', async () => {
    const file = tempSqlitePath('serve_no_worker');
    cleanups.push(() => Promise.resolve(file.cleanup()));
    const url = `sqlite:${file.path}`;
    // A first run: the key's --create makes the database that serve then opens.
    const key = await createKeyWithCli(
      url,
      { tenant: 'acme', actor: 'ops-e2e', role: 'operator' },
      { create: true },
    );
    const { proc, base } = await serve(url, ['--no-worker']);
    cleanups.push(() => proc.kill());
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const created = await fetch(`${base}/v1/runs`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ agent: 'credit-agent', input: 'x', run_id: 'run_e2e_2' }),
    });
    expect(created.status).toBe(201);
    await sleep(1_000);
    const run = (await (await fetch(`${base}/v1/runs/run_e2e_2`, { headers })).json()) as { status: string };
    expect(run.status).toBe('queued');
    expect((await proc.stop(20_000)).code).toBe(0);
  });

  it('refuses a missing SQLite database without --create, instead of starting an empty ledger', async () => {
    const file = tempSqlitePath('serve_missing');
    cleanups.push(() => Promise.resolve(file.cleanup()));
    const commands = [['serve', '--port', '0'], ['worker']];
    for (const command of commands) {
      const proc = new OncelyProcess(
        [...command, '--config', CONFIG, '--database-url', `sqlite:${file.path}`],
        {},
      );
      cleanups.push(() => proc.kill());
      const exit = await proc.exit(20_000);
      expect(exit.code, proc.stderr).toBe(1);
      expect(proc.stderr).toContain('STORE_NOT_FOUND');
      expect(proc.stderr).toContain('oncely migrate');
      expect(existsSync(file.path)).toBe(false);
    }
  });

  it('refuses a PostgreSQL database whose schema it does not know, saying to migrate', async () => {
    const db = await createTestDatabase('serve_unmigrated');
    cleanups.push(() => db.drop());
    const proc = new OncelyProcess(
      ['serve', '--config', CONFIG, '--database-url', db.url, '--port', '0'],
      {},
    );
    cleanups.push(() => proc.kill());
    const exit = await proc.exit(20_000);
    expect(exit.code).toBe(1);
    expect(proc.stderr).toContain('SCHEMA_OUTDATED');
    expect(proc.stderr).toContain('run `oncely migrate`');
  });
});
