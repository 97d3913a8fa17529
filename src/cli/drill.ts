import { randomInt } from 'node:crypto';
import { resolve } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { armedUnsafeSwitches, CRASH_POINTS, type CrashPointName } from '../crash/index.js';
import { runDrill, type DrillProgress, type DrillReport } from '../drill/run-drill.js';
import { FAULT_KINDS, KILLING_KINDS, type FaultKind } from '../drill/schedule.js';
import { positiveInt } from './worker.js';
import { output, renderTable } from './table.js';

/** `--duration 10m`, `90s`, `600` (seconds). */
function duration(value: string): number {
  const match = /^(\d+)(ms|s|m|h)?$/.exec(value.trim());
  if (match === null) throw new InvalidArgumentError('--duration is a time like 90s, 10m or 1h');
  const n = Number(match[1]);
  const unit = match[2] ?? 's';
  return n * (unit === 'ms' ? 1 : unit === 's' ? 1_000 : unit === 'm' ? 60_000 : 3_600_000);
}

function crashPointsOf(value: string): CrashPointName[] {
  const names = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const unknown = names.filter((n) => !(CRASH_POINTS as readonly string[]).includes(n));
  if (names.length === 0 || unknown.length > 0) {
    throw new InvalidArgumentError(
      `--crash-points takes a comma-separated list of ${CRASH_POINTS.join(', ')}${unknown.length > 0 ? `; not ${unknown.join(', ')}` : ''}`,
    );
  }
  return names as CrashPointName[];
}

function faultsOf(value: string): FaultKind[] {
  const names = value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  const unknown = names.filter((n) => !(FAULT_KINDS as readonly string[]).includes(n));
  if (names.length === 0 || unknown.length > 0) {
    throw new InvalidArgumentError(
      `--faults takes a comma-separated list of ${FAULT_KINDS.join(', ')}${unknown.length > 0 ? `; not ${unknown.join(', ')}` : ''}`,
    );
  }
  if (!names.some((n) => (KILLING_KINDS as readonly string[]).includes(n))) {
    throw new InvalidArgumentError(`--faults must name one that kills: ${KILLING_KINDS.join(', ')}`);
  }
  return names as FaultKind[];
}

function seedOf(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) {
    throw new InvalidArgumentError('--seed is a whole number from 0 to 4294967295');
  }
  return n;
}

interface DrillFlags {
  store: 'postgres' | 'sqlite' | 'embedded-postgres';
  databaseUrl?: string;
  runs: number;
  workers: number;
  iterations: number;
  seed?: number;
  duration: number;
  workDir?: string;
  redisServer?: boolean;
  crashPoints?: CrashPointName[];
  faults?: FaultKind[];
  maxDriveAttempts?: number;
  json?: boolean;
}

/**
 * `oncely drill`: kills real worker processes on purpose, against a store of your choosing, and
 * checks from the ledger and from each downstream's own books that every call took effect once.
 */
export function drillCommand(): Command {
  return new Command('drill')
    .description(
      'kill real workers on purpose (crash points, random moments, freezes, the API mid-resolve) and prove one effect per call',
    )
    .addOption(
      new Option(
        '--store <kind>',
        'the store to drill: postgres (--database-url), one SQLite file, or embedded-postgres (a server of its own, restarted once mid-run)',
      )
        .choices(['postgres', 'sqlite', 'embedded-postgres'])
        .default('sqlite'),
    )
    .option(
      '--database-url <url>',
      'postgres://… (default: $ONCELY_DATABASE_URL); the drill writes under a tenant of its own',
    )
    .option(
      '--runs <n>',
      'agent runs queued at a time (another wave while kills remain)',
      positiveInt('--runs'),
      24,
    )
    .option('--workers <n>', 'oncely worker processes', positiveInt('--workers'), 3)
    .option('--iterations <n>', 'kills to make', positiveInt('--iterations'), 30)
    .option('--seed <n>', 'the fault schedule’s seed (a failing drill prints it; default: random)', seedOf)
    .option('--duration <time>', 'the longest the faults go on', duration, 600_000)
    .option(
      '--work-dir <dir>',
      'where the configuration, the SQLite file and logs go (default: .oncely/drill-<seed>)',
    )
    .option(
      '--redis-server',
      'start a redis-server of its own (on PATH) for the processes, and SIGKILL it and start it again once mid-run',
    )
    .option(
      '--crash-points <list>',
      'arm only these crash points (comma-separated; default: all of them)',
      crashPointsOf,
    )
    .option(
      '--faults <list>',
      `apply only these kinds of fault (comma-separated, at least one that kills; default: all of ${FAULT_KINDS.join(', ')})`,
      faultsOf,
    )
    .option(
      '--max-drive-attempts <n>',
      "drives in a row a run may take without getting anywhere before the runtime's guard fails it " +
        '(default: the runtime’s, 5); the operator retries such runs once the faults are over',
      positiveInt('--max-drive-attempts'),
    )
    .option('--json', 'print the report as JSON')
    .action(async (flags: DrillFlags) => {
      const seed = flags.seed ?? randomInt(0, 0xffffffff);
      const databaseUrl = flags.databaseUrl ?? process.env.ONCELY_DATABASE_URL;
      const redisUrl = process.env.ONCELY_REDIS_URL || undefined;
      const redis =
        flags.redisServer === true
          ? { own: true as const }
          : redisUrl === undefined
            ? undefined
            : { url: redisUrl };
      if (flags.faults?.includes('redis') === true && redis === undefined) {
        throw new InvalidArgumentError('--faults redis needs a Redis: --redis-server or ONCELY_REDIS_URL');
      }
      if (flags.faults?.includes('postgres-restart') === true && flags.store !== 'embedded-postgres') {
        throw new InvalidArgumentError('--faults postgres-restart needs --store embedded-postgres');
      }
      const live = process.stderr.isTTY;
      let lastLine = 0;
      process.stderr.write(
        `oncely drill: seed ${seed}, ${flags.store}${redis === undefined ? '' : 'own' in redis ? ' with its own Redis' : ' with Redis'}, ` +
          `${flags.workers} workers, ${flags.iterations} kills\n`,
      );
      const unsafe = armedUnsafeSwitches();
      if (unsafe.length > 0) {
        process.stderr.write(
          `oncely drill: UNSAFE TEST SWITCHES ARMED (${unsafe.join(', ')}): the workers break the promise on purpose; this drill should fail\n`,
        );
      }
      const report = await runDrill({
        store: flags.store,
        ...(databaseUrl === undefined ? {} : { databaseUrl }),
        ...(redis === undefined ? {} : { redis }),
        ...(flags.crashPoints === undefined ? {} : { crashPoints: flags.crashPoints }),
        ...(flags.faults === undefined ? {} : { faults: flags.faults }),
        ...(flags.maxDriveAttempts === undefined ? {} : { maxDriveAttempts: flags.maxDriveAttempts }),
        runs: flags.runs,
        workers: flags.workers,
        iterations: flags.iterations,
        seed,
        durationMs: flags.duration,
        workDir: resolve(flags.workDir ?? `.oncely/drill-${seed}`),
        onProgress: (p) => {
          const line = progressLine(p);
          if (live) process.stderr.write(`\r${line}\u001b[K`);
          else if (Date.now() - lastLine >= 5_000) {
            lastLine = Date.now();
            process.stderr.write(`${line}\n`);
          }
        },
      });
      if (live) process.stderr.write('\n');
      output(flags.json, report, () => reportText(report));
      if (!report.ok) process.exitCode = 1;
    });
}

function progressLine(p: DrillProgress): string {
  return `[${(p.elapsedMs / 1000).toFixed(0)} s] ${p.phase}: ${p.kills}/${p.iterations} kills, ${p.runsSettled}/${p.runsQueued} runs ended`;
}

const ms = (v: number | null): string => (v === null ? '-' : `${Math.round(v)} ms`);

/** The report as a person reads it: a table per fault kind, the totals, and every violation. */
export function reportText(r: DrillReport): string {
  const faults = renderTable(
    ['FAULT', 'FAULTS', 'KILLS', 'RECOVERIES', 'RECOVERY P50', 'P95', 'UNKNOWNS', 'BY HOOK', 'BY OPERATOR'],
    r.faults.map((f) => [
      f.kind,
      String(f.faults),
      String(f.kills),
      String(f.recoveries),
      ms(f.recoveryP50Ms),
      ms(f.recoveryP95Ms),
      String(f.unknowns),
      String(f.settledByHook),
      String(f.settledByOperator),
    ]),
  );
  const statuses = Object.entries(r.runs.byStatus)
    .map(([s, n]) => `${n} ${s}`)
    .join(', ');
  const lines = [
    `drill ${r.ok ? 'passed' : 'FAILED'}: seed ${r.seed}, ${r.store}${r.redis ? ' with Redis' : ''}, tenant ${r.tenantId}, ${(r.elapsedMs / 1000).toFixed(0)} s`,
    '',
    faults,
    `runs: ${r.runs.queued} queued (${statuses})`,
    `kills: ${r.kills}; crash points hit: ${r.crashPointsHit.join(', ') || 'none'}`,
    `effects: ${r.effects}; duplicates: ${r.duplicates}; admitted second effects (frozen request, shown as a conflict): ${r.admittedDuplicates}`,
    `unknown calls: ${r.unknowns}; settled by a hook: ${r.settledByHook}; by the operator: ${r.settledByOperator}`,
    `operator (through the API): ${r.operatorActions.approved} approved, ${r.operatorActions.resolved} resolved, ${r.operatorActions.refused} refused (tried again later)${r.operatorActions.retried > 0 ? `, ${r.operatorActions.retried} failed run(s) retried` : ''}`,
  ];
  if (r.violations.length > 0) {
    lines.push('', `${r.violations.length} violation(s) (replay with --seed ${r.seed}):`);
    for (const v of r.violations) {
      lines.push(
        `  ${v.rule}: ${v.message}${v.afterStep === null ? '' : ` (after schedule step ${v.afterStep})`}`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}
