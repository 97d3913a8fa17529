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
}

/** Server-wide counters read before and after a case (PostgreSQL: next xid, WAL position). */
export interface Counters {
  read(): Promise<{ xid: bigint; walBytes: bigint }>;
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
    const { seconds, latencies } = await timeOps(open, benchCase.ops, benchCase.concurrency);
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
