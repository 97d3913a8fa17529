/**
 * `npm run bench`: oncely beside its floors and its peers, in rounds, on one PostgreSQL and on SQLite
 * files; writes docs/benchmarks.md and docs/benchmarks.json. See docs/benchmarks.md for the method.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, totalmem, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { format, resolveConfig } from 'prettier';
import { startOwnPostgres, type OwnPostgres } from '../test/support/own-postgres.js';
import type { BenchCase } from './case.js';
import { median, postgresCpuMs, sample, shuffled, type Counters, type Sample } from './measure.js';
import { modelCases } from './model-cases.js';
import { postgresCases, sqliteCases } from './oncely-cases.js';
import { peerCases } from './peers.js';
import {
  judge,
  markdown,
  summarise,
  type CaseSummary,
  type Environment,
  type TargetResult,
} from './report.js';
import { measureCluster } from './cluster.js';
import { measureScale } from './scale.js';
import { longRuns, type StorageReport } from './storage.js';
import { measureDrivers } from './driver.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const SCALE = Number(process.env.BENCH_SCALE ?? 1);
const SEED = Number(process.env.BENCH_SEED ?? Date.now() % 100_000);
const ROOT = fileURLToPath(new URL('../', import.meta.url));
/**
 * `BENCH_ONLY=<regular expression>`: only the cases whose ids match, in rounds as always, for an A/B
 * of one change; it prints their figures and writes nothing (no storage, scale or cluster parts).
 */
const ONLY = process.env.BENCH_ONLY ? new RegExp(process.env.BENCH_ONLY) : undefined;

function progress(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

/** Next xid and WAL position, read without assigning an xid. */
function serverCounters(admin: pg.Client): Counters {
  return {
    async read() {
      const { rows } = await admin.query<{ xid: string; wal: string }>(
        `SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS xid,
                (pg_current_wal_lsn() - '0/0'::pg_lsn)::text AS wal`,
      );
      const row = rows[0]!;
      const serverCpuMs = postgresCpuMs();
      return {
        xid: BigInt(row.xid),
        walBytes: BigInt(row.wal.split('.')[0]!),
        ...(serverCpuMs === undefined ? {} : { serverCpuMs }),
      };
    },
  };
}

async function environment(admin: pg.Client, importMs: number): Promise<Environment> {
  const setting = async (name: string): Promise<string> =>
    (await admin.query<{ v: string }>(`SELECT current_setting($1) AS v`, [name])).rows[0]!.v;
  const durability: Record<string, string> = {};
  for (const name of ['fsync', 'synchronous_commit', 'wal_sync_method', 'full_page_writes']) {
    durability[name] = await setting(name);
  }
  const cpu = cpus();
  return {
    date: new Date().toISOString().slice(0, 10),
    machine: `${cpu.length} × ${cpu[0]?.model.trim() ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB`,
    node: process.version,
    postgres: await setting('server_version'),
    durability,
    rounds: ROUNDS,
    scale: SCALE,
    seed: SEED,
    importMs,
  };
}

/** Median time to import the built package in a fresh process, beyond Node's own start. */
function importCost(): number {
  const script = `const t = performance.now(); await import(${JSON.stringify(join(ROOT, 'dist/index.js'))}); process.stdout.write(String(performance.now() - t));`;
  const times = Array.from({ length: 5 }, () =>
    Number(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })),
  );
  return median(times);
}

/** `BENCH_REPORT_ONLY=1`: writes docs/benchmarks.md again from docs/benchmarks.json, measuring nothing. */
async function reportOnly(): Promise<void> {
  const saved = JSON.parse(readFileSync(join(ROOT, 'docs/benchmarks.json'), 'utf8')) as {
    environment: Environment;
    samples: Sample[];
    storage?: StorageReport;
  };
  const all = [...postgresCases(), ...(await peerCases(progress)), ...sqliteCases(), ...modelCases()];
  const rounds = new Map<number, Map<string, Sample>>();
  for (const s of saved.samples) {
    const round = rounds.get(s.round) ?? new Map<string, Sample>();
    round.set(s.id, s);
    rounds.set(s.round, round);
  }
  await writeReport(saved.environment, all, saved.samples, [...rounds.values()], saved.storage);
}

async function writeReport(
  env: Environment,
  all: readonly BenchCase[],
  samples: readonly Sample[],
  rounds: readonly Map<string, Sample>[],
  storage?: StorageReport,
): Promise<void> {
  const summaries = summarise(all, samples);
  const results = judge(rounds);
  const docPath = join(ROOT, 'docs/benchmarks.md');
  const style = (await resolveConfig(docPath)) ?? {};
  writeFileSync(
    docPath,
    await format(markdown(env, summaries, results, storage), { ...style, parser: 'markdown' }),
  );
  const json = JSON.stringify({
    environment: env,
    targets: results.map((r) => ({ id: r.target.id, says: r.target.says, value: r.value, met: r.met })),
    cases: summaries,
    samples,
    ...(storage === undefined ? {} : { storage }),
  });
  writeFileSync(join(ROOT, 'docs/benchmarks.json'), await format(json, { ...style, parser: 'json' }));
  printFigures(summaries, results);
  progress('wrote docs/benchmarks.md and docs/benchmarks.json');
}

function printFigures(summaries: readonly CaseSummary[], results: readonly TargetResult[]): void {
  console.table(
    summaries.map((s) => ({
      case: s.id,
      perSecond: Math.round(s.perSecond),
      p50ms: s.p50ms.toFixed(3),
      commits: s.commitsPerUnit?.toFixed(2) ?? '',
      wal: s.walBytesPerUnit?.toFixed(0) ?? '',
      cpuClient: s.clientCpuMsPerUnit?.toFixed(3) ?? '',
      cpuServer: s.serverCpuMsPerUnit?.toFixed(3) ?? '',
    })),
  );
  for (const r of results) {
    if (r.value === undefined) continue;
    const verdict = r.met === true ? 'met   ' : r.met === false ? 'MISSED' : 'n/a   ';
    console.log(`${verdict} ${r.target.says}: ${r.value.toFixed(2)}`);
  }
}

async function main(): Promise<void> {
  let own: OwnPostgres | undefined;
  let adminUrl = process.env.DATABASE_URL;
  if (adminUrl === undefined || adminUrl === '') {
    progress('no DATABASE_URL: starting an embedded PostgreSQL (fsync=off, figures not durable)');
    own = await startOwnPostgres('bench');
    adminUrl = own.url;
  }
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  const dir = mkdtempSync(join(tmpdir(), 'oncely-bench-'));
  const counters = serverCounters(admin);
  const scratch = (n: number): { name: string; url: string } => {
    const name = `oncely_bench_${process.pid}_${n}`;
    const url = new URL(adminUrl);
    url.pathname = `/${name}`;
    return { name, url: url.toString() };
  };
  try {
    const pgCases: BenchCase[] = [...postgresCases(), ...(await peerCases(progress))];
    // Cases on a SQLite file, and the model's, which need no database (they are given a path too).
    const liteCases = [...sqliteCases(), ...modelCases()];
    const all = [...pgCases, ...liteCases].filter((c) => ONLY === undefined || ONLY.test(c.id));
    const samples: Sample[] = [];
    const rounds: Map<string, Sample>[] = [];
    let n = 0;
    for (let round = 1; round <= ROUNDS; round++) {
      const order = shuffled(all, SEED + round);
      const mine = new Map<string, Sample>();
      for (const c of order) {
        n += 1;
        progress(`round ${round}/${ROUNDS}: ${c.id} (${c.ops} ops)`);
        let s: Sample;
        if (liteCases.includes(c)) {
          const path = join(dir, `case${n}.db`);
          s = await sample(c, round, path, undefined);
          for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
        } else {
          const db = scratch(n);
          await admin.query(`CREATE DATABASE ${db.name}`);
          try {
            s = await sample(c, round, db.url, counters);
          } finally {
            await admin.query(`DROP DATABASE IF EXISTS ${db.name} WITH (FORCE)`);
          }
        }
        samples.push(s);
        mine.set(c.id, s);
      }
      rounds.push(mine);
    }
    if (ONLY !== undefined) {
      printFigures(summarise(all, samples), judge(rounds));
      return;
    }
    // Run storage: long runs on both stores, then a database at scale (each on databases of their own).
    const fresh = async (): Promise<{ url: string; drop(): Promise<void> }> => {
      const db = scratch((n += 1));
      await admin.query(`CREATE DATABASE ${db.name}`);
      return {
        url: db.url,
        drop: async () => void (await admin.query(`DROP DATABASE IF EXISTS ${db.name} WITH (FORCE)`)),
      };
    };
    const storage: StorageReport = {
      longRuns: await longRuns(fresh, Number(process.env.BENCH_LONG_RUNS ?? 3), progress),
      scale: await measureScale(fresh, progress),
      cluster: await measureCluster(fresh, progress),
      driver: await measureDrivers(fresh, progress),
    };
    progress('importing the package, five times');
    const env = await environment(admin, importCost());
    await writeReport(env, all, samples, rounds, storage);
  } finally {
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
    await own?.destroy();
  }
}

await (process.env.BENCH_REPORT_ONLY === '1' ? reportOnly() : main());
