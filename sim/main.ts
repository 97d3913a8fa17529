import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import fc from 'fast-check';
import { schedulePlan, withDefaults, type SchedulePlan } from './plan.js';
import { makeTemplate, Schedule, type ScheduleResult } from './schedule.js';
import { SqlitePool, type SimStores } from './stores.js';
import { PostgresPool, simDatabase } from './postgres-stores.js';

/*
 * `npm run sim`: schedules drawn from one seed, each run against the real runtime in a simulated
 * world (sim/schedule.ts), the invariants checked after each (sim/invariants.ts). On a violation:
 * fast-check shrinks the schedule to the fewest runs, faults, operator actions and choices that still
 * fail; the shrunk schedule is run twice more, its two timelines compared (a replay must be exact),
 * and printed with the seed and path that replay it.
 */

interface Options {
  seed?: number;
  schedules?: number;
  minutes?: number;
  store: string;
  databaseUrl?: string;
  json?: boolean;
  path?: string;
  verbose?: boolean;
  dump?: string;
  firstFailure?: boolean;
  saveFailure?: string;
  plan?: string;
}

const int =
  (what: string) =>
  (value: string): number => {
    const n = Number(value);
    if (!Number.isSafeInteger(n) || n < 0) throw new InvalidArgumentError(`${what} is a whole number ≥ 0`);
    return n;
  };
const positive = (value: string): number => {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('a positive number');
  return n;
};

const program = new Command('sim')
  .description('runs the real oncely runtime through seeded schedules of crashes, freezes and operators')
  .option('--seed <n>', 'the seed (default: a fresh one, printed)', int('--seed'))
  .option('--schedules <n>', 'how many schedules (default 200)', int('--schedules'))
  .option(
    '--minutes <m>',
    'run batches of 200 schedules (seeds seed, seed+1, …) for this long instead',
    positive,
  )
  .option('--store <kind>', 'sqlite or postgres', 'sqlite')
  .option(
    '--database-url <url>',
    'with --store postgres: the server, where a database oncely_sim_<pid> is made and dropped (default DATABASE_URL)',
  )
  .option('--path <path>', 'replay one schedule: the path a failure printed (with its --seed)')
  .option('--json', 'print the summary as one JSON line')
  .option('--verbose', 'print each schedule as it ends')
  .option('--dump <dir>', "write each schedule's timeline to DIR/s<N>.txt (to compare two runs)")
  .option('--first-failure', 'stop at the first violation without shrinking it (for sim:mutants)')
  .option('--save-failure <file>', 'write the first failing schedule, as JSON, to this file')
  .option(
    '--plan <file>',
    'run one schedule from a JSON file (a printed shrunk schedule, an entry of sim/regressions.json)',
  );

async function main(): Promise<number> {
  const options = program.parse(process.argv).opts<Options>();
  // The runtime warns of what the world does to it on purpose (a database cut off, a lease not
  // renewed); the timelines say what happened. Printed only with --verbose.
  process.removeAllListeners('warning');
  if (options.verbose === true) process.on('warning', (w) => console.error(`warning: ${w.message}`));
  if (options.store !== 'sqlite' && options.store !== 'postgres') {
    console.error(`sim: --store ${options.store}: sqlite or postgres`);
    return 2;
  }
  const serverUrl = options.databaseUrl ?? process.env.DATABASE_URL;
  if (options.store === 'postgres' && serverUrl === undefined) {
    console.error('sim: --store postgres needs --database-url or DATABASE_URL');
    return 2;
  }
  const seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
  const dir = mkdtempSync(join(existsSync('/dev/shm') ? '/dev/shm' : tmpdir(), 'oncely-sim-'));
  let stores: SimStores | undefined;
  let database: { drop(): Promise<void> } | undefined;
  try {
    const template = await makeTemplate(dir);
    let pool: SimStores;
    if (serverUrl !== undefined && options.store === 'postgres') {
      const made = await simDatabase(serverUrl);
      database = made;
      pool = await PostgresPool.create(made.url);
    } else pool = SqlitePool.create(template, dir);
    stores = pool;
    if (options.plan !== undefined) return await runPlanFile(options.plan, pool);
    let n = 0;
    const digest = createHash('sha256');
    const started = Date.now();
    let lastReport = started;
    let firstFailure: { schedule: number; seconds: number; violation: string } | undefined;
    const runOne = async (plan: SchedulePlan): Promise<ScheduleResult> => {
      n += 1;
      const result = await new Schedule(plan, pool).run();
      digest.update(result.timeline.join('\n')).update('\u0000');
      if (firstFailure === undefined && result.violations.length > 0) {
        firstFailure = {
          schedule: n,
          seconds: (Date.now() - started) / 1000,
          violation: result.violations[0]!,
        };
        if (options.saveFailure !== undefined) writeFileSync(options.saveFailure, JSON.stringify(plan));
      }
      if (options.dump !== undefined)
        writeFileSync(join(options.dump, `s${n}.txt`), result.timeline.join('\n'));
      if (options.verbose === true) {
        console.error(
          `schedule ${n}: ${result.steps} steps, ${result.virtualMs} virtual ms, ${result.violations.length} violations`,
        );
      }
      if (Date.now() - lastReport > 10_000) {
        lastReport = Date.now();
        console.error(`sim: ${n} schedules so far (${rate(n, started)}/min)`);
      }
      return result;
    };
    const check = (batchSeed: number, numRuns: number) =>
      fc.check(
        fc.asyncProperty(schedulePlan, async (plan) => {
          const result = await runOne(plan);
          if (result.violations.length > 0) throw new Error(result.violations.join('\n'));
        }),
        {
          seed: batchSeed,
          numRuns,
          endOnFailure: options.firstFailure === true,
          ...(options.path === undefined ? {} : { path: options.path }),
        },
      );
    // --minutes: batches of BATCH schedules, seeds seed, seed + 1, …, until the time is up; a batch
    // always finishes (a schedule is never cut off), and a failure names its batch's seed.
    let failedSeed = seed;
    let details = await check(seed, options.minutes === undefined ? (options.schedules ?? 200) : BATCH);
    if (options.minutes !== undefined) {
      const deadline = started + options.minutes * 60_000;
      while (!details.failed && Date.now() < deadline) {
        failedSeed += 1;
        details = await check(failedSeed, BATCH);
      }
    }
    let violations = 0;
    if (details.failed && details.counterexample !== null) {
      const [plan] = details.counterexample;
      const first = await new Schedule(plan, pool).run();
      const again = await new Schedule(plan, pool).run();
      violations = 1;
      console.log(`sim: VIOLATION with seed ${failedSeed}, path ${details.counterexamplePath ?? '?'}`);
      for (const line of first.violations) console.log(`  ${line}`);
      if (first.violations.length === 0) {
        console.log(
          `  (the run failed with: ${String(details.errorInstance)}; run again alone, it held: the replay is not exact)`,
        );
      }
      console.log('the shrunk schedule:');
      console.log(JSON.stringify(plan));
      console.log('its timeline:');
      for (const line of first.timeline) console.log(`  ${line}`);
      const same = JSON.stringify(first.timeline) === JSON.stringify(again.timeline);
      console.log(
        same
          ? 'replayed twice: the same timeline'
          : 'replayed twice: THE TIMELINES DIFFER (the replay is not exact)',
      );
      if (!same) for (const line of again.timeline) console.log(`  | ${line}`);
      console.log(`replay: npm run sim -- --seed ${failedSeed} --path ${details.counterexamplePath ?? ''}`);
    } else if (details.failed) {
      console.log(`sim: the run itself failed: ${String(details.errorInstance)}`);
      violations = 1;
    }
    // The same seed and count give the same digest: every schedule replayed exactly.
    const timelines = digest.digest('hex').slice(0, 16);
    const summary = {
      schedules: n,
      violations,
      perMinute: rate(n, started),
      seed,
      timelines,
      ...(violations > 0 ? { failedSeed } : {}),
      ...(firstFailure === undefined ? {} : { firstFailure }),
    };
    if (options.json === true) console.log(JSON.stringify(summary));
    else
      console.log(`sim: timelines digest ${timelines} (the same seed and count must give the same digest)`);
    console.log(
      `sim: ${n} schedules, ${violations} violations, ${summary.perMinute} schedules/min, seed ${seed}`,
    );
    return violations === 0 ? 0 : 1;
  } finally {
    await stores?.close();
    await database?.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `--plan`: one schedule from a file (a plan, or a regression entry with one), its timeline printed. */
async function runPlanFile(file: string, stores: SimStores): Promise<number> {
  const parsed = JSON.parse(readFileSync(file, 'utf8')) as SchedulePlan | { plan: SchedulePlan };
  const plan = withDefaults('plan' in parsed ? parsed.plan : parsed);
  const result = await new Schedule(plan, stores).run();
  for (const line of result.timeline) console.log(`  ${line}`);
  for (const line of result.violations) console.log(`VIOLATION: ${line}`);
  console.log(`sim: 1 schedules, ${result.violations.length === 0 ? 0 : 1} violations, plan ${file}`);
  return result.violations.length === 0 ? 0 : 1;
}

/** Schedules a batch of a timed run (`--minutes`), each batch with the next seed. */
const BATCH = 200;

function rate(n: number, started: number): number {
  return Math.round((n * 60_000) / Math.max(1, Date.now() - started));
}

process.exitCode = await main();
