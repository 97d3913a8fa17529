import { mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createApiKey } from '../api/auth/api-keys.js';
import { ApiClient } from '../api/client.js';
import { loadConfig } from '../config/index.js';
import { OncelyError, errorInfo } from '../errors/index.js';
import { openRuntime, type Runtime } from '../runs/index.js';
import { openStore } from '../store/index.js';
import { loadIoredis } from '../store/redis-wakeups.js';
import { judge, TOOL_SERVICES, type Violation } from './checks.js';
import { agentNames, DEFAULT_TIMINGS, writeDrillConfig, type DrillTimings } from './config.js';
import { DOWNSTREAM_KINDS, type Books, type DownstreamKind } from './downstream.js';
import { openLedgerReader } from './read-ledger.js';
import { freePort, startOwnPostgres } from './own-postgres.js';
import { CLI, DOWNSTREAM_MAIN, DrillProcess } from './processes.js';
import { FAULT_KINDS, schedule, type Fault, type FaultKind } from './schedule.js';
import { CRASH_POINTS, type CrashPointName } from '../crash/index.js';

/*
 * `oncely drill`: the proof, run against a store of the user's choosing. It starts the downstream
 * services (their own processes, their own books), an API process and N worker processes, queues
 * agent runs, and breaks the processes on a schedule drawn from its seed — SIGKILL at each named
 * crash point and at random moments and during boot, SIGSTOP past the lease, the API killed while an
 * operator settles a call — while an operator (the drill, through the HTTP API) approves refunds and
 * settles the calls no hook can, from the downstream books. When the kills are done, the workers
 * finish every run; then the ledger (read with SQL) is judged against the books (checks.ts).
 */

export type DrillStoreKind = 'postgres' | 'sqlite' | 'embedded-postgres';

export interface DrillOptions {
  readonly store: DrillStoreKind;
  /** PostgreSQL: the database to drill (its own tenant, `drill-…`: nothing else is touched). */
  readonly databaseUrl?: string;
  /**
   * Workers and the API use Redis for wake-ups and run events: `{ url }`, a Redis of yours, whose
   * client connections the drill cuts once (CLIENT KILL; the server itself is left alone); or
   * `{ own: true }`, a redis-server the drill starts on a port of its own and SIGKILLs and starts
   * again once.
   */
  readonly redis?: { readonly url: string } | { readonly own: true };
  /** Runs queued at first; another wave is queued each time they are all done before the kills are. */
  readonly runs: number;
  readonly workers: number;
  /** Kills to make (SIGKILLs of workers and of the API). */
  readonly iterations: number;
  readonly seed: number;
  /** The longest the faults go on, whatever the kills count (ms). */
  readonly durationMs: number;
  /** Where the configuration, the SQLite file and the processes' logs go. */
  readonly workDir: string;
  readonly timings?: DrillTimings;
  /**
   * Drives in a row without getting anywhere before the runtime's guard fails a run
   * (`RUN_RETRIES_EXCEEDED`); the runtime's default (5) unless set. The operator retries such runs
   * once the faults are over.
   */
  readonly maxDriveAttempts?: number;
  /** The crash points armed (default: every named point); each fires at least once. */
  readonly crashPoints?: readonly CrashPointName[];
  /** The kinds of fault applied (default: every kind that applies); each is applied at least once. */
  readonly faults?: readonly FaultKind[];
  /** Told of the drill's progress every quarter second. */
  readonly onProgress?: (progress: DrillProgress) => void;
  /** Told of each fault as it is applied. */
  readonly onFault?: (fault: Fault, detail: string) => void;
}

export interface DrillProgress {
  readonly elapsedMs: number;
  readonly kills: number;
  readonly iterations: number;
  readonly runsQueued: number;
  readonly runsSettled: number;
  readonly phase: 'faults' | 'finishing' | 'checking';
}

export interface FaultStats {
  readonly kind: FaultKind;
  /** Faults applied (an armed crash point counts once it fired). */
  readonly faults: number;
  readonly kills: number;
  /** Runs another (or a fresh) process claimed after a kill, and how long that took. */
  readonly recoveries: number;
  readonly recoveryP50Ms: number | null;
  readonly recoveryP95Ms: number | null;
  /** Calls first unknown after a fault of this kind (the newest before), and who settled them. */
  readonly unknowns: number;
  readonly settledByHook: number;
  readonly settledByOperator: number;
}

export interface DrillReport {
  readonly seed: number;
  readonly store: DrillStoreKind;
  readonly redis: boolean;
  readonly tenantId: string;
  readonly workers: number;
  readonly elapsedMs: number;
  readonly runs: {
    readonly queued: number;
    readonly completed: number;
    readonly byStatus: Record<string, number>;
  };
  readonly kills: number;
  readonly crashPointsHit: readonly string[];
  readonly faults: readonly FaultStats[];
  readonly effects: number;
  readonly duplicates: number;
  readonly admittedDuplicates: number;
  readonly unknowns: number;
  readonly settledByHook: number;
  readonly settledByOperator: number;
  readonly operatorActions: {
    readonly approved: number;
    readonly resolved: number;
    readonly refused: number;
    /** Runs the guard failed (`RUN_RETRIES_EXCEEDED`) that the operator retried, once each, when the faults were over. */
    readonly retried: number;
  };
  readonly violations: readonly (Violation & { readonly afterStep: number | null })[];
  readonly ok: boolean;
}

/** A process the drill killed (a worker, the API, its own redis-server): `owner` is a worker's lease owner. */
interface Death {
  readonly at: number;
  readonly owner: string | null;
  readonly kind: FaultKind;
  readonly step: number;
}

interface Applied {
  readonly at: number;
  readonly kind: FaultKind;
  readonly step: number;
}

interface Slot {
  proc: DrillProcess;
  /** The crash point it was armed with, if any. */
  armed: Fault | undefined;
  frozen: boolean;
  /** Set by the drill before it kills the process, so its death is put down to that fault. */
  killing: Fault | undefined;
}

const TENANT_PREFIX = 'drill';

export async function runDrill(options: DrillOptions): Promise<DrillReport> {
  const timings = options.timings ?? DEFAULT_TIMINGS;
  const started = Date.now();
  mkdirSync(options.workDir, { recursive: true });
  const logDir = join(options.workDir, 'logs');
  mkdirSync(logDir, { recursive: true });
  const id = `${options.seed}-${started.toString(36)}`;
  const configFile = writeDrillConfig(options.workDir, id, timings, options.maxDriveAttempts);
  const agents = agentNames(id);
  const tenantId = `${TENANT_PREFIX}-${id}`;
  // With a PostgreSQL of its own (embedded-postgres), the drill restarts the server once mid-run.
  const ownPostgres =
    options.store === 'embedded-postgres' ? await startOwnPostgres('drill', { fsync: true }) : undefined;
  const url = ownPostgres?.url ?? storeUrl(options);
  let store;
  try {
    store = await openStore(url, { migrate: true, create: true });
  } catch (error) {
    await ownPostgres?.destroy();
    throw error;
  }
  /** The drill's live processes (each leaves the set when it exits). */
  const processes = new Set<DrillProcess>();
  const track = (proc: DrillProcess): DrillProcess => {
    processes.add(proc);
    void proc.exited.then(() => processes.delete(proc));
    return proc;
  };
  // However the drill ends (an error, Ctrl-C, SIGTERM), its processes end with it.
  const killAll = (): void => {
    for (const p of processes) if (p.running) p.child.kill('SIGKILL');
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    killAll();
    process.kill(process.pid, signal);
  };
  process.on('exit', killAll);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const downstreams = new Map<DownstreamKind, { proc: DrillProcess; url: string }>();
  // What the drill runs in this process, ended however the drill ends (an error included): no dead
  // worker is replaced, the operator and the progress line stop, the runtime closes.
  let stopping = false;
  let operating = true;
  let operatorLoop: Promise<void> = Promise.resolve();
  let progressTimer: NodeJS.Timeout | undefined;
  let runtime: Runtime | undefined;
  try {
    const config = await loadConfig(configFile, { env: {} });
    const opened = await openRuntime({ store, agents: [...config.agents.values()] });
    runtime = opened;
    const { key: apiKey } = await createApiKey(store.apiKeys, {
      tenantId,
      actorId: 'drill-operator',
      role: 'operator',
    });

    for (const kind of DOWNSTREAM_KINDS) {
      const proc = new DrillProcess(
        `downstream ${kind}`,
        [DOWNSTREAM_MAIN, kind, String(timings.lateMs), String(timings.serviceMs)],
        {},
        logDir,
      );
      track(proc);
      const [, serviceUrl = ''] = await proc.waitFor(/listening (\S+)/, 10_000);
      downstreams.set(kind, { proc, url: serviceUrl });
    }
    const redis = options.redis === undefined ? undefined : await startRedis(options.redis, logDir, track);
    const env: Record<string, string> = {
      ONCELY_DRILL_KEYED_URL: downstreams.get('keyed')?.url ?? '',
      ONCELY_DRILL_UNKEYED_URL: downstreams.get('unkeyed')?.url ?? '',
      ONCELY_DRILL_LATE_URL: downstreams.get('late')?.url ?? '',
      ONCELY_DRILL_NEVER_URL: downstreams.get('never')?.url ?? '',
      ONCELY_DRILL_TOOL_TIMEOUT_MS: String(timings.toolTimeoutMs),
      ONCELY_LOG_LEVEL: 'info',
      ONCELY_REDIS_URL: redis?.url ?? '',
    };

    // The API process, restarted whenever the drill kills it.
    const apiPort = await freePort();
    const api = {
      proc: undefined as DrillProcess | undefined,
      client: new ApiClient(`http://127.0.0.1:${apiPort}`, apiKey),
    };
    const startApi = async (): Promise<void> => {
      const proc = new DrillProcess(
        'api',
        [CLI, 'serve', '--no-worker', '-c', configFile, '--database-url', url, '--port', String(apiPort)],
        env,
        logDir,
      );
      track(proc);
      api.proc = proc;
      await waitReady(api.client.baseUrl, proc);
    };
    await startApi();

    // The workers, each in a slot; a dead one is replaced.
    const deaths: Death[] = [];
    const applied: Applied[] = [];
    /** The fault took effect now; `killed`: it killed a process (a worker's lease owner, or null). */
    const took = (fault: Fault, killed?: { owner: string | null }): void => {
      const at = Date.now();
      applied.push({ at, kind: fault.kind, step: fault.step });
      if (killed !== undefined) deaths.push({ at, owner: killed.owner, kind: fault.kind, step: fault.step });
    };
    const crashPointsHit = new Set<string>();
    const slots: Slot[] = [];
    const spawnWorker = (armed: Fault | undefined): DrillProcess => {
      const proc = new DrillProcess(
        'worker',
        [
          CLI,
          'worker',
          '-c',
          configFile,
          '--database-url',
          url,
          '--lease-ms',
          String(timings.leaseMs),
          '--poll-ms',
          '100',
          '--concurrency',
          '4',
          '--grace-ms',
          String(timings.leaseMs),
        ],
        {
          ...env,
          ...(armed?.point === undefined
            ? {}
            : { ONCELY_CRASH_AT: armed.point, ONCELY_CRASH_SKIP: String(armed.skip ?? 0) }),
        },
        logDir,
      );
      track(proc);
      return proc;
    };
    const watch = (slot: Slot, proc: DrillProcess): void => {
      void proc.exited.then(({ signal }) => {
        if (slot.proc !== proc) return;
        const owner = `${hostname()}:${proc.pid}`;
        if (signal === 'SIGKILL') {
          const crashed = /crash point (\S+) armed/.exec(proc.stderr);
          const fault = crashed !== null ? slot.armed : slot.killing;
          if (crashed?.[1] !== undefined) crashPointsHit.add(crashed[1]);
          if (fault !== undefined) took(fault, { owner });
        }
        if (stopping) return;
        slot.armed = undefined;
        slot.killing = undefined;
        slot.frozen = false;
        slot.proc = spawnWorker(undefined);
        watch(slot, slot.proc);
      });
    };
    for (let i = 0; i < options.workers; i++) {
      const slot: Slot = {
        proc: spawnWorker(undefined),
        armed: undefined,
        frozen: false,
        killing: undefined,
      };
      slots.push(slot);
      watch(slot, slot.proc);
    }

    // The runs: a wave now, another whenever the faults outlast them.
    const runIds: string[] = [];
    const queueWave = async (): Promise<void> => {
      for (let i = 0; i < options.runs; i++) {
        const n = runIds.length + 1;
        const runId = `drill_${n}`;
        await opened.startRun({
          tenantId,
          runId,
          agent: n % 3 === 0 ? agents.approval : agents.plain,
          input: `Customer ${n}: please sort out my order.`,
        });
        runIds.push(runId);
      }
    };
    await queueWave();

    // The operator: approves refunds, settles the calls no hook can, from the books.
    const actions = { approved: 0, resolved: 0, refused: 0, retried: 0 };
    const operator = new Operator(api, downstreams, actions);
    let phase: DrillProgress['phase'] = 'faults';
    const phaseNow = (): DrillProgress['phase'] => phase;
    let settled = 0;
    progressTimer = setInterval(() => {
      options.onProgress?.({
        elapsedMs: Date.now() - started,
        kills: deaths.length,
        iterations: options.iterations,
        runsQueued: runIds.length,
        runsSettled: settled,
        phase,
      });
    }, 250);
    const reader = await openLedgerReader(url);
    const countSettled = (): Promise<number> => reader.settledRuns(tenantId);
    operatorLoop = (async () => {
      while (operating) {
        // The API may be down (the drill killed it): the next round tries again.
        await operator.round(timings).catch(() => undefined);
        // (Read through a function: the loop runs on while the drill moves `phase` on.)
        if (phaseNow() === 'finishing') await operator.retryExhausted().catch(() => undefined);
        settled = await countSettled().catch(() => settled);
        await sleep(200);
      }
    })();

    // The faults, in the schedule's order, until the kills are made (or the time is up).
    const faults = schedule({
      seed: options.seed,
      workers: options.workers,
      leaseMs: timings.leaseMs,
      api: true,
      redis: redis !== undefined,
      postgres: ownPostgres !== undefined,
      ...(options.crashPoints === undefined ? {} : { points: options.crashPoints }),
      ...(options.faults === undefined ? {} : { kinds: options.faults }),
    });
    const freeSlot = (preferred: number): Slot | undefined => {
      for (let i = 0; i < slots.length; i++) {
        const slot = slots[(preferred + i) % slots.length];
        if (
          slot !== undefined &&
          slot.armed === undefined &&
          !slot.frozen &&
          slot.killing === undefined &&
          slot.proc.running
        ) {
          return slot;
        }
      }
      return undefined;
    };
    /**
     * For a freeze: a free slot whose worker holds a running run (a frozen idle worker proves
     * nothing), waiting up to a lease for one; else any free slot.
     */
    const busySlot = async (preferred: number): Promise<Slot | undefined> => {
      const until = Date.now() + timings.leaseMs;
      do {
        const held = await reader.heldRuns(tenantId).catch(() => new Map<string, number>());
        for (let i = 0; i < slots.length; i++) {
          const slot = freeSlot((preferred + i) % slots.length);
          if (slot !== undefined && (held.get(`${hostname()}:${slot.proc.pid}`) ?? 0) > 0) return slot;
        }
        await sleep(50);
      } while (Date.now() < until);
      return freeSlot(preferred);
    };
    const deadline = started + options.durationMs;
    // Every crash point fires and every kind of fault is applied at least once, whatever the count
    // of kills (a point whose armed worker never got there is armed again).
    const kindsWanted = FAULT_KINDS.filter(
      (k) =>
        (options.faults ?? FAULT_KINDS).includes(k) &&
        (k !== 'redis' || redis !== undefined) &&
        (k !== 'postgres-restart' || ownPostgres !== undefined),
    );
    const missingPoints = (): CrashPointName[] =>
      kindsWanted.includes('crash-point')
        ? (options.crashPoints ?? CRASH_POINTS).filter((p) => !crashPointsHit.has(p))
        : [];
    const covered = (): boolean =>
      missingPoints().length === 0 && kindsWanted.every((k) => applied.some((a) => a.kind === k));
    let pending: Fault | undefined;
    while ((deaths.length < options.iterations || !covered()) && Date.now() < deadline) {
      if (settled >= runIds.length) await queueWave();
      let fault = pending ?? (faults.next().value as Fault);
      pending = undefined;
      if (fault.kind === 'crash-point' && deaths.length >= options.iterations) {
        const missing = missingPoints()[0];
        if (missing !== undefined) fault = { ...fault, point: missing };
      }
      await sleep(fault.kind === 'kill' || fault.kind === 'boot-kill' ? 0 : fault.delayMs);
      if (fault.kind === 'api-kill') {
        const detail = await operator.killMidResolve(fault.delayMs % 5, async () => {
          await api.proc?.kill();
          took(fault, { owner: null });
          await startApi();
        });
        options.onFault?.(fault, detail);
        continue;
      }
      if (fault.kind === 'postgres-restart') {
        if (ownPostgres === undefined) continue;
        // A fast shutdown (every connection cut, in-flight transactions rolled back), then up again.
        await ownPostgres.stop();
        took(fault);
        await sleep(1_000);
        await ownPostgres.start();
        options.onFault?.(fault, 'PostgreSQL stopped, started again after 1 s');
        continue;
      }
      if (fault.kind === 'redis') {
        if (redis === undefined) continue;
        const detail = await redis.cut();
        took(fault, redis.own ? { owner: null } : undefined);
        options.onFault?.(fault, detail);
        continue;
      }
      if (fault.kind === 'boot-kill') {
        // An extra worker, killed while it boots (and perhaps claims its first run).
        const proc = spawnWorker(undefined);
        await sleep(fault.delayMs);
        const owner = `${hostname()}:${proc.pid}`;
        await proc.kill();
        took(fault, { owner });
        options.onFault?.(fault, `worker ${proc.pid} killed ${fault.delayMs} ms into its boot`);
        continue;
      }
      const slot = fault.kind === 'freeze' ? await busySlot(fault.slot) : freeSlot(fault.slot);
      if (slot === undefined) {
        // Every worker is armed or frozen: the same fault, once one is free.
        pending = fault;
        await sleep(100);
        continue;
      }
      if (fault.kind === 'crash-point') {
        // The slot's worker stops (a deploy's SIGTERM: it hands its runs over between steps), and a
        // worker armed at the point takes its place.
        const old = slot.proc;
        slot.armed = fault;
        slot.proc = spawnWorker(fault);
        watch(slot, slot.proc);
        void old.stop(timings.leaseMs * 2);
        options.onFault?.(
          fault,
          `worker ${slot.proc.pid} armed at ${fault.point ?? '?'} (skip ${fault.skip ?? 0})`,
        );
        // An armed worker that never gets there (no work of that kind) is recycled.
        const armedProc = slot.proc;
        void sleep(20_000).then(() => {
          if (slot.proc === armedProc && armedProc.running && !stopping) {
            slot.armed = undefined;
            void armedProc.stop(timings.leaseMs * 2);
          }
        });
      } else if (fault.kind === 'kill') {
        await sleep(fault.delayMs);
        if (!slot.proc.running || slot.armed !== undefined) continue;
        slot.killing = fault;
        const pid = slot.proc.pid;
        await slot.proc.kill();
        options.onFault?.(fault, `worker ${pid} killed`);
      } else if (fault.kind === 'freeze') {
        slot.frozen = true;
        const proc = slot.proc;
        proc.signal('SIGSTOP');
        took(fault);
        options.onFault?.(fault, `worker ${proc.pid} frozen for ${timings.leaseMs * 2} ms`);
        await sleep(timings.leaseMs * 2);
        proc.signal('SIGCONT');
        slot.frozen = false;
      }
    }

    // Finishing: no more faults; every worker healthy (armed ones replaced), the runs finish.
    phase = 'finishing';
    for (const slot of slots) {
      if (slot.frozen) slot.proc.signal('SIGCONT');
      if (slot.armed !== undefined) {
        const old = slot.proc;
        slot.armed = undefined;
        slot.proc = spawnWorker(undefined);
        watch(slot, slot.proc);
        void old.stop(timings.leaseMs * 2);
      }
    }
    // Every run final, and every call settled: the unknown calls of a run ended `failed`
    // (RUN_RETRIES_EXCEEDED, its drives killed too often in a row) are settled by the workers' sweep
    // where a hook can tell, and by the operator from the books once they are ten leases old.
    const finishBy = Date.now() + Math.max(60_000, 30 * timings.leaseMs);
    while (Date.now() < finishBy) {
      settled = await countSettled();
      if (settled >= runIds.length && (await reader.unknownCalls(tenantId)) === 0) break;
      await sleep(250);
    }
    phase = 'checking';
    operating = false;
    await operatorLoop;
    stopping = true;
    await Promise.all(slots.map((s) => s.proc.stop(timings.leaseMs * 2)));
    clearInterval(progressTimer);

    // The verdict: the books, then the ledger read with SQL.
    const books: Books[] = [];
    for (const [, service] of downstreams) {
      const response = await fetch(`${service.url}/books`);
      books.push((await response.json()) as Books);
    }
    const ledger = await reader.read(tenantId);
    await reader.close();
    const verdict = judge(ledger, books);

    const byStatus: Record<string, number> = {};
    for (const run of ledger.runs) byStatus[run.status] = (byStatus[run.status] ?? 0) + 1;
    const stepAt = (at: number): number | null =>
      applied.filter((a) => a.at <= at).reduce<number | null>((s, a) => Math.max(s ?? 0, a.step), null);
    const lastFaultAt = (at: number): Applied | undefined =>
      applied
        .filter((a) => a.at <= at)
        .reduce<Applied | undefined>((l, a) => (l === undefined || a.at > l.at ? a : l), undefined);

    // Unknown calls: records that were ever `indeterminate`, or settled by a hook or an operator.
    const firstUnknownAt = new Map<string, number>();
    for (const h of ledger.history) {
      if (
        (h.to === 'indeterminate' || h.actorKind === 'reconcile' || h.actorKind === 'operator') &&
        !firstUnknownAt.has(h.key)
      ) {
        firstUnknownAt.set(h.key, h.at);
      }
    }
    const unknownKeys = ledger.records.filter(
      (r) => firstUnknownAt.has(r.key) && TOOL_SERVICES[r.toolName] !== undefined,
    );
    const recoveries = recoveryTimes(deaths, ledger.events);
    const faultStats = FAULT_KINDS.map((kind): FaultStats => {
      const mine = recoveries.filter((r) => r.kind === kind).map((r) => r.ms);
      const unknowns = unknownKeys.filter((r) => lastFaultAt(firstUnknownAt.get(r.key) ?? 0)?.kind === kind);
      return {
        kind,
        faults: applied.filter((a) => a.kind === kind).length,
        kills: deaths.filter((d) => d.kind === kind).length,
        recoveries: mine.length,
        recoveryP50Ms: quantile(mine, 0.5),
        recoveryP95Ms: quantile(mine, 0.95),
        unknowns: unknowns.length,
        settledByHook: unknowns.filter((r) => r.settledBy === 'reconcile').length,
        settledByOperator: unknowns.filter((r) => r.settledBy === 'operator').length,
      };
    });
    // Each violation names the schedule step before what it is about last changed: its call's newest
    // history entry, or its run's newest event.
    const lastChange = new Map<string, number>();
    for (const h of ledger.history) lastChange.set(h.key, Math.max(lastChange.get(h.key) ?? 0, h.at));
    for (const e of ledger.events) lastChange.set(e.runId, Math.max(lastChange.get(e.runId) ?? 0, e.at));
    const violations = verdict.violations.map((v) => {
      const at = lastChange.get(v.key ?? '') ?? lastChange.get(v.runId ?? '');
      return { ...v, afterStep: at === undefined ? null : stepAt(at) };
    });
    return {
      seed: options.seed,
      store: options.store,
      redis: redis !== undefined,
      tenantId,
      workers: options.workers,
      elapsedMs: Date.now() - started,
      runs: { queued: runIds.length, completed: byStatus.completed ?? 0, byStatus },
      kills: deaths.length,
      crashPointsHit: [...crashPointsHit].sort(),
      faults: faultStats,
      effects: verdict.effects,
      duplicates: verdict.violations.filter((v) => v.rule === 'duplicate-effect').length,
      admittedDuplicates: verdict.admittedDuplicates,
      unknowns: unknownKeys.length,
      settledByHook: unknownKeys.filter((r) => r.settledBy === 'reconcile').length,
      settledByOperator: unknownKeys.filter((r) => r.settledBy === 'operator').length,
      operatorActions: actions,
      violations,
      ok: violations.length === 0,
    };
  } finally {
    stopping = true;
    operating = false;
    clearInterval(progressTimer);
    await operatorLoop;
    await runtime?.close().catch(() => undefined);
    await Promise.all([...processes].map((p) => p.kill()));
    process.off('exit', killAll);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await store.close().catch(() => undefined);
    await ownPostgres?.destroy();
  }
}

interface DrillRedis {
  readonly url: string;
  /** The drill's own server (killed and started again), or the user's (its clients cut off). */
  readonly own: boolean;
  /** Cuts Redis off once: says what it did. */
  cut(): Promise<string>;
}

/** The Redis the processes use, and how the drill cuts it off. */
async function startRedis(
  choice: NonNullable<DrillOptions['redis']>,
  logDir: string,
  track: (proc: DrillProcess) => DrillProcess,
): Promise<DrillRedis> {
  const { Redis } = await loadIoredis('the drill');
  if ('url' in choice) {
    return {
      url: choice.url,
      own: false,
      async cut() {
        const admin = new Redis(choice.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
        try {
          await admin.connect();
          // Every client of this Redis, the drill's processes' and any other's: what a restart looks
          // like from the clients' side; the server and its data are left alone.
          const normal = await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
          const pubsub = await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
          return `Redis connections cut (${String(normal)} clients, ${String(pubsub)} subscribers)`;
        } finally {
          admin.disconnect();
        }
      },
    };
  }
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  const start = async (): Promise<DrillProcess> => {
    const proc = track(
      new DrillProcess(
        'redis',
        ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
        {},
        logDir,
        'redis-server',
      ),
    );
    await proc.waitFor(/Ready to accept connections/, 10_000);
    return proc;
  };
  let server = await start();
  return {
    url,
    own: true,
    async cut() {
      await server.kill();
      await sleep(1_000);
      server = await start();
      return `redis-server killed, started again after 1 s on port ${port}`;
    },
  };
}

function storeUrl(options: DrillOptions): string {
  if (options.store === 'sqlite') return `sqlite:${join(options.workDir, 'drill.db')}`;
  if (options.databaseUrl === undefined || !/^postgres(ql)?:\/\//.test(options.databaseUrl)) {
    throw new OncelyError(
      'CONFIG_INVALID',
      'a PostgreSQL drill needs the database: --database-url postgres://… or ONCELY_DATABASE_URL ' +
        '(the drill writes under a tenant of its own, drill-…, and touches nothing else)',
    );
  }
  return options.databaseUrl;
}

/** For each kill, the runs its process held and how long until another process claimed each. */
function recoveryTimes(
  deaths: readonly Death[],
  events: readonly { runId: string; at: number; type: string; data: Record<string, unknown> }[],
): { kind: FaultKind; ms: number }[] {
  const claims = events.filter((e) => e.type === 'run.claimed').sort((a, b) => a.at - b.at);
  const out: { kind: FaultKind; ms: number }[] = [];
  const byRun = new Map<string, typeof claims>();
  for (const c of claims) byRun.set(c.runId, [...(byRun.get(c.runId) ?? []), c]);
  for (const death of deaths) {
    for (const [, list] of byRun) {
      const held = list.filter((c) => c.at <= death.at).at(-1);
      if (held === undefined || held.data.owner !== death.owner) continue;
      const next = list.find((c) => c.at > death.at);
      if (next !== undefined) out.push({ kind: death.kind, ms: next.at - death.at });
    }
  }
  return out;
}

function quantile(values: readonly number[], q: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? null;
}

async function waitReady(baseUrl: string, proc: DrillProcess): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      const response = await fetch(`${baseUrl}/readyz`);
      if (response.ok) return;
    } catch {
      // not listening yet
    }
    if (!proc.running) throw new Error(`the API process exited:\n${proc.stderr.slice(-2000)}`);
    if (Date.now() > deadline)
      throw new Error(`the API process was not ready within 20 s:\n${proc.stderr.slice(-2000)}`);
    await sleep(50);
  }
}

interface UnknownCall {
  readonly idempotency_key: string;
  readonly tool_name: string;
  readonly status: string;
  readonly updated_at: string;
}

/**
 * The drill's operator, through the HTTP API as a person would: approves every pending refund, and
 * settles the unknown calls no hook settles (the never-applying partner's, and any call unknown for
 * long) from the downstream service's books: completed with the effect's id if it is there, failed
 * if not. A call whose attempt may still land is refused by the API (409); it tries again later.
 */
class Operator {
  constructor(
    private readonly api: { client: ApiClient },
    private readonly downstreams: ReadonlyMap<DownstreamKind, { url: string }>,
    private readonly actions: { approved: number; resolved: number; refused: number; retried: number },
  ) {}

  readonly #retried = new Set<string>();

  /**
   * Retries, once each, the runs the runtime's guard failed (`RUN_RETRIES_EXCEEDED`: killed under
   * five drives in a row), as that error says to (`oncely runs retry`): driven again with no more
   * faults, each asks its unknown calls' hooks first, and finishes.
   */
  async retryExhausted(): Promise<void> {
    const failed = await this.api.client.get<{ items: { run_id: string; error: { code: string } | null }[] }>(
      '/v1/runs',
      { status: 'failed', limit: 200 },
    );
    for (const run of failed.items) {
      if (run.error?.code !== 'RUN_RETRIES_EXCEEDED' || this.#retried.has(run.run_id)) continue;
      try {
        await this.api.client.post(`/v1/runs/${encodeURIComponent(run.run_id)}/retry`, {
          reason: 'drill operator: the faults are over; retrying a run the guard failed',
        });
        this.#retried.add(run.run_id);
        this.actions.retried += 1;
      } catch {
        this.actions.refused += 1;
      }
    }
  }

  async round(timings: DrillTimings): Promise<void> {
    const approvals = await this.api.client.get<{ items: { idempotency_key: string }[] }>('/v1/approvals', {
      status: 'pending',
    });
    for (const a of approvals.items) {
      await this.decide(a.idempotency_key);
    }
    for (const call of await this.unknownCalls()) {
      const age = Date.now() - Date.parse(call.updated_at);
      if (call.tool_name !== 'ping' && age < 10 * timings.leaseMs) continue;
      await this.resolve(call);
    }
  }

  async unknownCalls(): Promise<UnknownCall[]> {
    const page = await this.api.client.get<{ items: UnknownCall[] }>('/v1/tool-executions', {
      status: 'unknown',
    });
    return page.items;
  }

  async decide(key: string): Promise<void> {
    try {
      await this.api.client.post(`/v1/approvals/${encodeURIComponent(key)}/approve`, {
        reason: 'drill operator approves',
      });
      this.actions.approved += 1;
    } catch {
      this.actions.refused += 1;
    }
  }

  async truth(call: UnknownCall): Promise<{ id: string } | undefined> {
    const service = TOOL_SERVICES[call.tool_name];
    if (service === undefined) return undefined;
    const url = this.downstreams.get(service.kind)?.url;
    const response = await fetch(
      `${url ?? ''}/effects?${service.by}=${encodeURIComponent(call.idempotency_key)}`,
    );
    // Books that cannot be read settle nothing: the operator tries again on its next round.
    if (!response.ok) throw new Error(`the ${service.kind} service's books answered ${response.status}`);
    const found = ((await response.json()) as { data: { id: string }[] }).data;
    return found[0];
  }

  async resolve(call: UnknownCall): Promise<void> {
    const effect = await this.truth(call);
    const body =
      effect === undefined
        ? { status: 'failed', reason: `drill operator: the ${call.tool_name} service's books show no effect` }
        : {
            status: 'completed',
            reason: `drill operator: the ${call.tool_name} service's books show effect ${effect.id}`,
            result: { effectId: effect.id },
            result_reference: effect.id,
          };
    try {
      await this.api.client.post(
        `/v1/tool-executions/${encodeURIComponent(call.idempotency_key)}/resolve`,
        body,
      );
      this.actions.resolved += 1;
    } catch {
      this.actions.refused += 1;
    }
  }

  /**
   * Sends a resolve (or, with nothing to settle, a list) and kills the API process while it is
   * handled; `kill` restarts it. The call is settled later, once, whichever way the killed request went.
   */
  async killMidResolve(afterMs: number, kill: () => Promise<void>): Promise<string> {
    const calls = await this.unknownCalls().catch(() => []);
    const call = calls.find((c) => c.tool_name === 'ping');
    // Caught at once: the request fails when the process dies under it, before it is awaited.
    const request = (call === undefined ? this.unknownCalls() : this.resolve(call)).catch((error: unknown) =>
      errorInfo(error),
    );
    await sleep(afterMs);
    await kill();
    await request;
    return call === undefined
      ? 'API killed while it listed the unknown calls (none to settle)'
      : `API killed while it resolved ${call.idempotency_key}`;
  }
}
