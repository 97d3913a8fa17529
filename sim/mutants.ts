import { spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import { MUTANTS, type Mutant } from './mutant-list.js';

/*
 * `npm run sim:mutants`: proof that the simulator finds what matters. Each mutant puts back one bug
 * that outside review found in oncely (sim/mutant-list.ts says which and where), in a copy of the
 * sources; the simulator then runs on that copy from a fixed seed until its first violation, or
 * until the budget of schedules is spent; the first failing schedule is then run on the sources
 * without the mutant, where it must hold (else the failure is not the mutant's: a bug of today's
 * code, or an invariant that is wrong). A mutant the simulator misses is reported as missed and
 * the script exits 1: the world or the invariants are too narrow. A mutant whose code is no longer
 * where the list says exits 2 (the list must follow the code).
 */

interface Options {
  seed: number;
  schedules: number;
  only?: string[];
  parallel: number;
  json?: boolean;
}

interface Report {
  readonly mutant: string;
  readonly caught: boolean;
  readonly schedules: number;
  readonly seconds: number;
  readonly violation?: string;
  readonly replay?: string;
  readonly problem?: string;
}

const whole = (value: string): number => {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError('a whole number ≥ 1');
  return n;
};

const program = new Command('sim:mutants')
  .description(
    'puts back, one at a time, the bugs outside review found, and shows the simulator catches each',
  )
  .option('--seed <n>', 'the seed of every mutant run', whole, 1)
  .option('--schedules <n>', 'the budget of schedules per mutant', whole, 2_000)
  .option('--only <names...>', `only these mutants (${MUTANTS.map((m) => m.name).join(', ')})`)
  .option('--parallel <n>', 'mutants run at once (one process each)', whole, 2)
  .option('--json', 'print the reports as one JSON line');

const ROOT = resolve(import.meta.dirname, '..');

/** A copy of the sources the simulator runs, with the mutant's edits applied. */
export function mutate(mutant: Mutant, into: string): void {
  for (const part of ['src', 'sim', 'package.json', 'tsconfig.json']) {
    cpSync(join(ROOT, part), join(into, part), { recursive: true });
  }
  symlinkSync(join(ROOT, 'node_modules'), join(into, 'node_modules'));
  for (const edit of mutant.edits) {
    const path = join(into, edit.file);
    const text = readFileSync(path, 'utf8');
    const found = text.split(edit.find).length - 1;
    if (found !== 1) {
      throw new Error(
        `mutant ${mutant.name}: ${edit.file} holds the code to change ${found} times (expected once); ` +
          'the code moved: update sim/mutant-list.ts',
      );
    }
    writeFileSync(
      path,
      text.replace(edit.find, () => edit.replace),
    );
  }
}

function runSim(
  dir: string,
  mutant: Mutant,
  options: Options,
): Promise<{ code: number | null; out: string }> {
  return new Promise((done, fail) => {
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        'sim/main.ts',
        '--seed',
        String(options.seed),
        '--schedules',
        String(options.schedules),
        '--first-failure',
        '--save-failure',
        join(dir, 'failure.json'),
        '--json',
      ],
      {
        cwd: dir,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, ONCELY_UNSAFE_TEST_SWITCHES: (mutant.switches ?? []).join(',') },
      },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', fail);
    child.on('close', (code) => done({ code, out }));
  });
}

/** One schedule from a file on the sources as they are (not the mutant's copy). */
function runPlan(file: string): Promise<{ code: number | null; out: string }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'sim/main.ts', '--plan', file], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ONCELY_UNSAFE_TEST_SWITCHES: '' },
    });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', fail);
    child.on('close', (code) => done({ code, out }));
  });
}

async function tryMutant(mutant: Mutant, options: Options): Promise<Report> {
  const dir = mkdtempSync(join(tmpdir(), `oncely-mutant-${mutant.name}-`));
  const started = Date.now();
  try {
    try {
      mutate(mutant, dir);
    } catch (error) {
      return {
        mutant: mutant.name,
        caught: false,
        schedules: 0,
        seconds: 0,
        problem: error instanceof Error ? error.message : String(error),
      };
    }
    const { code, out } = await runSim(dir, mutant, options);
    const summaryLine = out
      .split('\n')
      .reverse()
      .find((line) => line.startsWith('{'));
    const summary = summaryLine === undefined ? undefined : (JSON.parse(summaryLine) as SimSummary);
    if (summary === undefined || (code !== 0 && code !== 1)) {
      return {
        mutant: mutant.name,
        caught: false,
        schedules: 0,
        seconds: (Date.now() - started) / 1000,
        problem: `the simulator did not run (exit ${String(code)}):\n${out.slice(-2_000)}`,
      };
    }
    const first = summary.firstFailure;
    if (first !== undefined) {
      // Caught only if the same schedule holds on the code without the mutant: the failure is the bug's.
      const clean = await runPlan(join(dir, 'failure.json'));
      if (clean.code !== 0) {
        return {
          mutant: mutant.name,
          caught: false,
          schedules: first.schedule,
          seconds: first.seconds,
          problem: `its first failing schedule fails without the mutant too (${first.violation}): a bug of today's code, or a false alarm of the invariants:\n${clean.out.slice(-3_000)}`,
        };
      }
    }
    return {
      mutant: mutant.name,
      caught: first !== undefined,
      schedules: first?.schedule ?? summary.schedules,
      seconds: first?.seconds ?? (Date.now() - started) / 1000,
      ...(first === undefined
        ? {}
        : {
            violation: first.violation,
            replay: `npm run sim -- --seed ${summary.failedSeed ?? options.seed}`,
          }),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

interface SimSummary {
  readonly schedules: number;
  readonly failedSeed?: number;
  readonly firstFailure?: { readonly schedule: number; readonly seconds: number; readonly violation: string };
}

async function main(): Promise<number> {
  const options = program.parse(process.argv).opts<Options>();
  const unknown = (options.only ?? []).filter((name) => !MUTANTS.some((m) => m.name === name));
  if (unknown.length > 0) {
    console.error(
      `sim:mutants: no mutant named ${unknown.join(', ')}; there are ${MUTANTS.map((m) => m.name).join(', ')}`,
    );
    return 2;
  }
  const chosen = MUTANTS.filter((m) => options.only === undefined || options.only.includes(m.name));
  console.error(
    `sim:mutants: ${chosen.length} mutants, seed ${options.seed}, up to ${options.schedules} schedules each, ${options.parallel} at once`,
  );
  const reports: Report[] = [];
  const queue = [...chosen];
  await Promise.all(
    Array.from({ length: Math.min(options.parallel, queue.length) }, async () => {
      for (let mutant = queue.shift(); mutant !== undefined; mutant = queue.shift()) {
        const report = await tryMutant(mutant, options);
        reports.push(report);
        console.error(line(report));
      }
    }),
  );
  reports.sort(
    (a, b) => chosen.findIndex((m) => m.name === a.mutant) - chosen.findIndex((m) => m.name === b.mutant),
  );
  if (options.json === true) console.log(JSON.stringify(reports));
  else {
    console.log('mutant                    caught  schedules  seconds  first violation');
    for (const r of reports) {
      console.log(
        `${r.mutant.padEnd(26)}${(r.caught ? 'yes' : 'NO').padEnd(8)}${String(r.schedules).padStart(9)}  ${r.seconds.toFixed(1).padStart(7)}  ${r.problem ?? r.violation ?? '-'}`,
      );
    }
  }
  const missed = reports.filter((r) => !r.caught);
  console.log(
    `sim:mutants: ${reports.length - missed.length} of ${reports.length} caught within ${options.schedules} schedules (seed ${options.seed})`,
  );
  if (reports.some((r) => r.problem?.includes('the code moved') === true)) return 2;
  return missed.length === 0 ? 0 : 1;
}

function line(r: Report): string {
  if (r.problem !== undefined) return `  ${r.mutant}: NOT SHOWN: ${r.problem}`;
  return r.caught
    ? `  ${r.mutant}: caught after ${r.schedules} schedules, ${r.seconds.toFixed(1)} s: ${r.violation ?? ''}`
    : `  ${r.mutant}: MISSED in ${r.schedules} schedules (${r.seconds.toFixed(1)} s)`;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === resolve(import.meta.filename)) {
  process.exitCode = await main();
}
