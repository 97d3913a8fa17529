import { readdirSync, readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { BenchCase, OpenCase } from './case.js';

/** What one case did in one round. */
export interface Sample {
  readonly id: string;
  readonly round: number;
  readonly seconds: number;
  /** Units (see `unitsPerOp`) per second. */
  readonly perSecond: number;
  /** Per unit, in milliseconds. */
  readonly p50ms: number;
  readonly p99ms: number;
  /** PostgreSQL only: write transactions (xids assigned) per unit, and WAL bytes per unit. */
  readonly commitsPerUnit?: number;
  readonly walBytesPerUnit?: number;
  /** This process's CPU (all its threads, user and system) per unit, in milliseconds. */
  readonly clientCpuMsPerUnit?: number;
  /** PostgreSQL's CPU per unit (every server process, when the server runs on this machine), in ms. */
  readonly serverCpuMsPerUnit?: number;
}

/** Server-wide counters read before and after a case (PostgreSQL: next xid, WAL position). */
export interface Counters {
  read(): Promise<{ xid: bigint; walBytes: bigint; serverCpuMs?: number }>;
}

/** CPU time (ms, user and system) of a process's threads from its `/proc` stat line. */
function procCpuMs(stat: string): number {
  // Fields after the command (which may hold spaces) in parentheses: utime and stime are the 12th and 13th.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
}
/** Linux's USER_HZ: the unit of `/proc/<pid>/stat`'s times (100 on every mainstream kernel). */
const CLOCK_TICKS = 100;

/**
 * The CPU used so far by every process of a local PostgreSQL server (its backends, writers and
 * checkpointer; ended backends' time is lost with them, so a case's connections must stay open while
 * it is measured, which they do), or undefined where there is no `/proc` or no such process.
 */
export function postgresCpuMs(): number | undefined {
  let total = 0;
  let found = false;
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return undefined;
  }
  for (const pid of pids) {
    try {
      if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== 'postgres') continue;
      total += procCpuMs(readFileSync(`/proc/${pid}/stat`, 'utf8'));
      found = true;
    } catch {
      // The process ended between the listing and the read.
    }
  }
  return found ? total : undefined;
}

/** Runs `ops` operations with `concurrency` workers, timing each one. */
export async function timeOps(
  open: OpenCase,
  ops: number,
  concurrency: number,
): Promise<{ seconds: number; latencies: number[] }> {
  const latencies: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < ops; i = next++) {
        const t = performance.now();
        await open.op(i);
        latencies.push(performance.now() - t);
      }
    }),
  );
  return { seconds: (performance.now() - started) / 1000, latencies };
}

export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Fisher-Yates with a seeded generator, so a run's order can be told and repeated. */
export function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let state = seed >>> 0 || 1;
  const random = (): number => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 0x1_0000_0000;
  };
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** One case in one round: open on `url`, the timed operations, close (the medians over rounds absorb the first round's warm-up). */
export async function sample(
  benchCase: BenchCase,
  round: number,
  url: string,
  counters: Counters | undefined,
): Promise<Sample> {
  const open = await benchCase.open(url);
  try {
    const units = benchCase.unitsPerOp ?? 1;
    const before = await counters?.read();
    const cpuBefore = process.cpuUsage();
    const { seconds, latencies } = await timeOps(open, benchCase.ops, benchCase.concurrency);
    const cpu = process.cpuUsage(cpuBefore);
    const after = await counters?.read();
    const sorted = latencies.map((ms) => ms / units).sort((a, b) => a - b);
    const totalUnits = benchCase.ops * units;
    const result: Sample = {
      id: benchCase.id,
      round,
      seconds,
      perSecond: totalUnits / seconds,
      p50ms: quantile(sorted, 0.5),
      p99ms: quantile(sorted, 0.99),
      clientCpuMsPerUnit: (cpu.user + cpu.system) / 1000 / totalUnits,
      ...(before?.serverCpuMs === undefined || after?.serverCpuMs === undefined
        ? {}
        : { serverCpuMsPerUnit: (after.serverCpuMs - before.serverCpuMs) / totalUnits }),
      ...(before === undefined || after === undefined
        ? {}
        : {
            commitsPerUnit: Number(after.xid - before.xid) / totalUnits,
            walBytesPerUnit: Number(after.walBytes - before.walBytes) / totalUnits,
          }),
    };
    return result;
  } finally {
    await open.close();
  }
}
