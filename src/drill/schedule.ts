import { CRASH_POINTS, type CrashPointName } from '../crash/index.js';

/*
 * The drill's faults, in order, from its seed: the same seed gives the same schedule (the same kinds,
 * targets, crash points, skips and gaps), so a failing drill replays from the seed it printed. What
 * the processes are doing when a fault lands still depends on the machine's timing; the schedule is
 * what the drill does, and each violation names the schedule step before its call's (or run's) last
 * change in the ledger.
 */

export const FAULT_KINDS = [
  'crash-point',
  'kill',
  'boot-kill',
  'freeze',
  'api-kill',
  'redis',
  'postgres-restart',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** The kinds that kill a process (the drill's `--iterations` counts these). */
export const KILLING_KINDS: readonly FaultKind[] = ['crash-point', 'kill', 'boot-kill', 'api-kill'];

export interface Fault {
  /** Its place in the schedule, from 1. */
  readonly step: number;
  readonly kind: FaultKind;
  /** The worker slot it acts on (0-based; `api-kill` acts on the API process). */
  readonly slot: number;
  /** `crash-point`: the point armed, and how many arrivals pass first. */
  readonly point?: CrashPointName;
  readonly skip?: number;
  /** Milliseconds to wait before the fault: `kill` the moment after the worker started, else the gap. */
  readonly delayMs: number;
}

/** A small, fast, seeded generator (mulberry32): the schedule's only source of chance. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

export interface ScheduleOptions {
  readonly seed: number;
  readonly workers: number;
  /** The lease: a freeze lasts past it. */
  readonly leaseMs: number;
  /** Whether the API process is the drill's (then `api-kill` is scheduled). */
  readonly api: boolean;
  /** Whether the processes use Redis (then it is cut off, once, among the first steps). */
  readonly redis: boolean;
  /** Whether the drill runs its PostgreSQL itself (then the server is restarted, once). */
  readonly postgres?: boolean;
  /** The crash points to arm (default: all of them). */
  readonly points?: readonly CrashPointName[];
  /** The kinds of fault to apply (default: all that apply); at least one of `KILLING_KINDS`. */
  readonly kinds?: readonly FaultKind[];
}

/**
 * The fault schedule, endless (the drill takes as many steps as it needs): every crash point and
 * every fault kind comes within the first steps, then they come at random, weighted toward kills
 * (Redis is cut off, and the drill's own PostgreSQL restarted, once only).
 */
export function* schedule(options: ScheduleOptions): Generator<Fault> {
  const next = random(options.seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T;
  const kinds = FAULT_KINDS.filter(
    (k) =>
      (options.kinds ?? FAULT_KINDS).includes(k) &&
      (options.api || k !== 'api-kill') &&
      (options.redis || k !== 'redis') &&
      (options.postgres === true || k !== 'postgres-restart'),
  );
  // First every crash point once, and every other kind once, in an order of the seed's.
  const points = kinds.includes('crash-point') ? (options.points ?? CRASH_POINTS) : [];
  const opening: { kind: FaultKind; point?: CrashPointName }[] = [
    ...points.map((point) => ({ kind: 'crash-point' as const, point })),
    ...kinds.filter((k) => k !== 'crash-point').map((kind) => ({ kind })),
  ];
  for (let i = opening.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [opening[i], opening[j]] = [opening[j]!, opening[i]!];
  }
  const weighted = (
    [
      'crash-point',
      'crash-point',
      'crash-point',
      'kill',
      'kill',
      'kill',
      'boot-kill',
      'freeze',
      'api-kill',
    ] as const
  ).filter((k) => kinds.includes(k));
  if (weighted.length === 0 || !kinds.some((k) => KILLING_KINDS.includes(k))) {
    throw new Error(`a drill's faults must include one that kills: ${KILLING_KINDS.join(', ')}`);
  }
  for (let step = 1; ; step++) {
    const planned = opening[step - 1];
    const kind = planned?.kind ?? pick(weighted);
    const slot = Math.floor(next() * options.workers);
    const gap = 150 + Math.floor(next() * 600);
    if (kind === 'crash-point') {
      const point = planned?.point ?? pick(points);
      yield { step, kind, slot, point, skip: Math.floor(next() * 4), delayMs: gap };
    } else if (kind === 'kill') {
      // A random moment of a worker's life: up to a lease into its drive.
      yield { step, kind, slot, delayMs: 100 + Math.floor(next() * options.leaseMs) };
    } else if (kind === 'boot-kill') {
      yield { step, kind, slot, delayMs: 30 + Math.floor(next() * 400) };
    } else {
      yield { step, kind, slot, delayMs: gap };
    }
  }
}
