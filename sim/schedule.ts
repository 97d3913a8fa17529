import { copyFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { setCrashPointHook } from '../src/crash/index.js';
import { aiRuntime } from '../src/models/ai-runtime.js';
import { isOncelyError } from '../src/errors/index.js';
import { resetMintedIds } from '../src/runs/messages.js';
import { Runtime } from '../src/runs/index.js';
import { openStore, type Store } from '../src/store/index.js';
import { startWorker } from '../src/worker/index.js';
import { seedRandomness } from './determinism.js';
import { checkInvariants } from './invariants.js';
import { runGuardedCaller } from './guarded.js';
import { operatorAct } from './operator.js';
import { PROCESSES, type Fault, type SchedulePlan } from './plan.js';
import { ProcessClock, WorldClock } from './virtual-clock.js';
import { SqliteFile, WatchedClock, type SimStores } from './stores.js';
import { WorkflowEngine } from '../src/workflows/index.js';
import {
  agentNameOf,
  currentProcess,
  LANDING_MARGIN_MS,
  runIdOf,
  TENANT,
  World,
  WORKFLOW_RUN_ID,
} from './world.js';

/*
 * One schedule: an empty ledger (a kept SQLite or PostgreSQL database emptied, or a copy of a
 * migrated SQLite file: see sim/stores.ts), three worker processes and an operator's, all the real
 * runtime, over one virtual clock. Every store call of every process waits at a gate; the plan's
 * choices say which waiting call goes next, its faults which process dies (before or after a store
 * call, or at a named crash point), freezes or comes back, and when. When nothing can run, time
 * moves to the next timer. The schedule ends when every run has ended or waits on a person and the
 * world is quiet, or at the horizon; then the invariants are checked.
 */

export const START_MS = Date.UTC(2030, 0, 1);
const HORIZON_MS = 60_000;
const LEASE_MS = 1_000;
const MAX_STEPS = 20_000;
/**
 * How long a quiet world runs on while a living process still holds a slot or an unrecorded outcome:
 * past a hook's longest race (2 s), a slot's lease (2 s) and an attempt's timeout plus its margin.
 */
const DRAIN_MS = 5_000;
const never = <T>(): Promise<T> => new Promise<T>(() => undefined);

export interface ScheduleResult {
  readonly violations: string[];
  readonly timeline: string[];
  readonly steps: number;
  readonly virtualMs: number;
}

export interface SlotTaken {
  readonly process: string;
  readonly tool: string;
  readonly slot: number;
  readonly atMs: number;
  released?: boolean;
}

interface Gate {
  readonly process: SimProcess;
  readonly label: string;
  open: () => void;
  /** Resolves when the call, once let through, has returned (or thrown). */
  readonly finished: Promise<void>;
  /** Runs as the call ends, before its result is handed back (a kill after the call). */
  afterCall?: () => void;
}

/** How long (real time) a PostgreSQL call let through may take before the schedule gives up. */
const REAL_IO_LIMIT_MS = 30_000;

class SimProcess {
  alive = true;
  killed = false;
  frozen = false;
  runtime: Runtime | undefined;
  workflows: WorkflowEngine | undefined;
  raw: Store | undefined;
  gates = 0;
  /** Store calls let through that have not returned yet. */
  inFlight = 0;
  /** Wakes whoever waits on this process's call in flight: it died, or its store set a timer. */
  interrupt: () => void = () => undefined;
  constructor(
    readonly index: number,
    readonly name: string,
  ) {}
}

export class Schedule {
  readonly #timeline: string[] = [];
  readonly #clock: WorldClock;
  readonly world: World;
  readonly #gates: Gate[] = [];
  readonly #processes: SimProcess[] = [];
  readonly #toClose: Store[] = [];
  /** Each fault strikes once: a restarted process is not killed again at the same point. */
  readonly #fired = new Set<Fault>();
  #choice = 0;
  #op: SimProcess | undefined;
  /** Every tool slot a process took, by holder: whether it let it go (the slot invariant). */
  readonly #slotsTaken = new Map<string, SlotTaken>();
  /** When each process was killed (virtual ms from the start). */
  readonly #killedAt = new Map<string, number>();
  /** Restarts under way that open a store with real I/O: waited for before the next choice. */
  readonly #starting: Promise<void>[] = [];
  readonly #stores: SimStores;
  /** The guarded caller has made all it will (or there is none): the world may be quiet. */
  #guardDone: boolean;

  /** `stores`: a kept ledger and its stores, or the path of a fresh copy of the template. */
  constructor(
    readonly plan: SchedulePlan,
    stores: SimStores | string,
  ) {
    this.#stores = typeof stores === 'string' ? new SqliteFile(stores) : stores;
    this.#clock = new WorldClock(START_MS, (owner) => this.#runnable(owner));
    this.world = new World(plan, this.#clock, { note: (what) => this.note(what) });
    this.#guardDone = plan.guarded === undefined;
  }

  note(what: string): void {
    this.#timeline.push(`${String(this.#clock.now() - START_MS).padStart(6)} ms  ${what}`);
  }

  #runnable(owner: string): boolean {
    if (owner === 'world') return true;
    const p = this.#processes.find((q) => q.name === owner);
    return p !== undefined && p.alive && !p.frozen;
  }

  /** Wraps each store method so it waits at a gate; a dead process's calls never return. */
  #gated(store: Store, p: SimProcess): Store {
    const gateObject = <T extends object>(target: T, label: string): T =>
      new Proxy(target, {
        get: (t, prop) => {
          const value = Reflect.get(t, prop, t) as unknown;
          if (typeof value !== 'function') return value;
          return (...args: unknown[]) => {
            let finish = (): void => undefined;
            const finished = new Promise<void>((resolve) => (finish = resolve));
            const gate: Gate = {
              process: p,
              label: `${label}${String(prop)}`,
              open: () => undefined,
              finished,
            };
            return new Promise<void>((open) => {
              if (!p.alive) return;
              gate.open = open;
              this.#gates.push(gate);
            }).then(async () => {
              p.inFlight += 1;
              let result: unknown;
              try {
                if (this.#cutOff(p)) throw new Error('simulated: the database is unreachable (ECONNREFUSED)');
                result = await (value as (...a: unknown[]) => Promise<unknown>).apply(t, args);
              } finally {
                p.inFlight -= 1;
                gate.afterCall?.();
                finish();
              }
              if (label === 'toolSlots.') this.#sawSlot(p, String(prop), args, result);
              return p.alive ? result : never();
            });
          };
        },
      });
    const subs = [
      'ledger',
      'runs',
      'workflows',
      'toolSlots',
      'monitor',
      'workers',
      'loopSteps',
      'apiKeys',
    ] as const;
    const wrapped = new Map<string | symbol, unknown>(subs.map((s) => [s, gateObject(store[s], `${s}.`)]));
    return new Proxy(store, {
      get: (t, prop) => {
        if (wrapped.has(prop)) return wrapped.get(prop);
        if (prop === 'transaction' || prop === 'reserveStep' || prop === 'recordStep') {
          return Reflect.get(gateObject(t, ''), prop) as unknown;
        }
        return Reflect.get(t, prop, t) as unknown;
      },
    });
  }

  async #start(index: number, generation: number, worker: boolean): Promise<SimProcess> {
    const p = new SimProcess(index, index < 0 ? 'operator' : `p${index}#${generation}`);
    this.#processes.push(p);
    const clock = new ProcessClock(this.#clock, p.name);
    // With real I/O, a store that sets a timer (a pause before trying again) waits on virtual time.
    p.raw = await this.#stores.open(
      this.#stores.realIo ? new WatchedClock(clock, () => p.interrupt()) : clock,
    );
    const store = this.#gated(p.raw, p);
    p.runtime = new Runtime(store, {
      agents: this.world.agents(),
      owner: p.name,
      clock,
      leaseMs: LEASE_MS,
      landingMarginMs: LANDING_MARGIN_MS,
      retryBaseMs: 100,
      reconcileEveryMs: 300,
      reconcileMaxWaitMs: 2_000,
      toolSlotLeaseMs: 2_000,
      log: { error: () => undefined },
    });
    const workflows = this.world.workflows();
    if (workflows.length > 0) p.workflows = new WorkflowEngine(p.runtime, workflows, { leaseMs: LEASE_MS });
    if (worker) {
      const runtime = p.runtime;
      const engine = p.workflows;
      currentProcess.run({ name: p.name, alive: () => p.alive }, () =>
        startWorker(runtime, {
          ...(engine === undefined ? {} : { workflows: engine }),
          concurrency: 2,
          pollMs: 200,
          sweepMs: 500,
          heartbeatMs: 2_000,
          wakeups: false,
        }),
      );
    }
    this.note(`${p.name} starts`);
    if (worker && this.plan.guarded?.process === index) this.#armGuarded(p, this.plan.guarded);
    return p;
  }

  /**
   * The guarded caller, in its process: from the plan's start (or at once, in a process started
   * again), making its calls again from the first. It dies with its process (its timer is dropped,
   * its store calls never return).
   */
  #armGuarded(p: SimProcess, plan: NonNullable<SchedulePlan['guarded']>): void {
    const runtime = p.runtime!;
    const delay = Math.max(0, START_MS + plan.startMs - this.#clock.now());
    this.#guardDone = false;
    this.#clock.add(
      p.name,
      () => {
        this.note(`${p.name}: the guarded caller starts`);
        void currentProcess
          .run({ name: p.name, alive: () => p.alive }, () =>
            runGuardedCaller(plan, this.world, runtime.ledger, (what) => this.note(what)),
          )
          .then(
            () => {
              if (p.alive) this.#guardDone = true;
            },
            (error: unknown) => {
              this.note(`${p.name}: the guarded caller stopped: ${String(error)}`);
              if (p.alive) this.#guardDone = true;
            },
          );
      },
      delay,
    );
  }

  /** Whether the plan cuts this process off from the store now. */
  #cutOff(p: SimProcess): boolean {
    const now = this.#clock.now() - START_MS;
    return this.plan.faults.some(
      (f) => f.kind === 'partition' && f.process === p.index && f.atMs <= now && now < f.atMs + f.forMs,
    );
  }

  /** Whether a process lived on from `fromMs` to the end: never killed, never cut off from the store. */
  #livedOn(name: string, fromMs: number): boolean {
    if (this.#killedAt.has(name)) return false;
    const index = Number(/^p(\d+)#/.exec(name)?.[1] ?? -1);
    return !this.plan.faults.some(
      (f) => f.kind === 'partition' && f.process === index && f.atMs + f.forMs > fromMs - START_MS,
    );
  }

  /** Whether a process was frozen or cut off from the store at some time after `fromMs` (absolute). */
  #stalledAfter(name: string, fromMs: number): boolean {
    const index = Number(/^p(\d+)#/.exec(name)?.[1] ?? -1);
    return this.plan.faults.some(
      (f) =>
        (f.kind === 'partition' || f.kind === 'freeze') &&
        f.process === index &&
        f.atMs + f.forMs > fromMs - START_MS,
    );
  }

  #sawSlot(p: SimProcess, method: string, args: unknown[], result: unknown): void {
    const [tool, , holder] = args as [string, unknown, string];
    if (method === 'acquire' && typeof result === 'number') {
      this.#slotsTaken.set(String(args[2]), {
        process: p.name,
        tool,
        slot: result,
        atMs: this.#clock.now() - START_MS,
      });
    }
    if (method === 'release') {
      const taken = this.#slotsTaken.get(holder);
      if (taken !== undefined) taken.released = true;
    }
  }

  #kill(p: SimProcess, how: string): void {
    if (!p.alive) return;
    p.alive = false;
    this.#killedAt.set(p.name, this.#clock.now() - START_MS);
    p.killed = true;
    p.interrupt();
    this.#clock.dropOwner(p.name);
    if (p.raw !== undefined) this.#toClose.push(p.raw);
    this.note(`${p.name} KILLED ${how}`);
    const generation = Number(p.name.split('#')[1] ?? '1') + 1;
    this.#clock.add(
      'world',
      () => {
        const starting = this.#start(p.index, generation, true).catch((error: unknown) => {
          this.note(`p${p.index}#${generation} could not start: ${String(error)}`);
        });
        if (this.#stores.realIo) this.#starting.push(starting.then(() => undefined));
      },
      this.plan.restartAfterMs,
    );
  }

  #armFaults(): void {
    for (const f of this.plan.faults) {
      if (f.kind === 'partition') {
        this.#clock.add(
          'world',
          () => this.note(`p${f.process} CUT OFF from the store for ${f.forMs} ms`),
          f.atMs,
        );
        this.#clock.add('world', () => this.note(`p${f.process} reaches the store again`), f.atMs + f.forMs);
      }
      if (f.kind === 'freeze') {
        this.#clock.add(
          'world',
          () => {
            const p = this.#processes.find((q) => q.index === f.process && q.alive);
            if (p === undefined || p.frozen) return;
            p.frozen = true;
            this.note(`${p.name} FROZEN for ${f.forMs} ms`);
            this.#clock.add(
              'world',
              () => {
                p.frozen = false;
                this.note(`${p.name} thaws`);
              },
              f.forMs,
            );
          },
          f.atMs,
        );
      }
    }
    const arrivals = new Map<string, number>();
    setCrashPointHook(async (point) => {
      const me = currentProcess.getStore();
      const p = this.#processes.find((q) => q.name === me?.name);
      if (p === undefined || !p.alive || p.index < 0) return;
      const id = `${p.name}:${point}`;
      const n = (arrivals.get(id) ?? 0) + 1;
      arrivals.set(id, n);
      const armed = this.plan.faults.find(
        (f) =>
          f.kind === 'crash-point' &&
          f.process === p.index &&
          f.point === point &&
          f.nth === n &&
          !this.#fired.has(f),
      );
      if (armed === undefined) return;
      this.#fired.add(armed);
      this.#kill(p, `at crash point ${point}`);
      await never();
    });
  }

  #armOperator(): void {
    for (const step of this.plan.operator) {
      this.#clock.add(
        'world',
        () => {
          const op = this.#op;
          if (op?.runtime === undefined) return;
          const runtime = op.runtime;
          void currentProcess.run({ name: op.name, alive: () => true }, () =>
            operatorAct(step.action, runtime, op.workflows, this.world.books, (what) =>
              this.note(`operator: ${what}`),
            ).catch((error: unknown) => {
              this.note(
                `operator: ${step.action} refused: ${isOncelyError(error) ? error.code : String(error)}`,
              );
            }),
          );
        },
        step.atMs,
      );
    }
  }

  /** Lets every microtask run: whatever can go on without a gate or a timer does. */
  async #settle(): Promise<void> {
    for (let i = 0; i < 3; i += 1) await new Promise<void>((resolve) => setImmediate(resolve));
    while (this.#starting.length > 0) {
      await Promise.all(this.#starting.splice(0));
      for (let i = 0; i < 3; i += 1) await new Promise<void>((resolve) => setImmediate(resolve));
    }
    for (const store of this.#toClose.splice(0)) this.#stores.sever(store);
  }

  /**
   * Lets a gate's call through when the calls are real I/O: first sets the database's time, then
   * waits for the call to end (or its process to die, or its store to wait on a timer) before
   * anything else goes. (SQLite's gates open at once: their calls end on the next ticks.)
   */
  async #letThrough(gate: Gate): Promise<void> {
    await this.#stores.sync(this.#clock.now());
    const p = gate.process;
    let limit: NodeJS.Timeout | undefined;
    const interrupted = new Promise<void>((resolve) => (p.interrupt = resolve));
    const tooLong = new Promise<never>((_, reject) => {
      limit = setTimeout(
        () => reject(new Error(`store call ${gate.label} of ${p.name} took over ${REAL_IO_LIMIT_MS} ms`)),
        REAL_IO_LIMIT_MS,
      );
    });
    gate.open();
    try {
      await Promise.race([gate.finished, interrupted, tooLong]);
    } finally {
      clearTimeout(limit);
      p.interrupt = () => undefined;
    }
  }

  #pick(n: number): number {
    const c = this.plan.choices[this.#choice] ?? 0;
    this.#choice += 1;
    return c % n;
  }

  async #quiet(observer: Store): Promise<boolean> {
    if (this.world.books.onWire > 0 || !this.#guardDone) return false;
    if (this.#processes.some((p) => p.index >= 0 && (p.frozen || !p.alive) && !this.#restarted(p)))
      return false;
    const now = this.#clock.now() - START_MS;
    if (
      this.plan.operator.some((s) => s.atMs >= now) ||
      this.plan.faults.some((f) => (f.kind === 'freeze' || f.kind === 'partition') && f.atMs + f.forMs >= now)
    )
      return false;
    if (this.plan.workflow && (await observer.workflows.get(TENANT, WORKFLOW_RUN_ID))?.status === 'running') {
      return false;
    }
    for (const summary of await observer.runs.list(TENANT, { limit: 100 })) {
      const run = summary;
      if (run.status === 'queued' || run.status === 'running') return false;
      if (run.status === 'awaiting_reconciliation') {
        // Waiting is quiet only while something is unknown; a settled run is requeued by a sweep.
        const unknown = await observer.ledger.list(TENANT, {
          runId: run.runId,
          statuses: ['started', 'indeterminate'],
          limit: 1,
        });
        if (unknown.length === 0) return false;
      }
    }
    return true;
  }

  /**
   * Whether a living process still holds a slot it took, or knows an outcome that is not recorded
   * yet: work that should end on its own (the invariants judge it once it had the time to).
   */
  async #unfinished(observer: Store): Promise<boolean> {
    if ([...this.#slotsTaken.values()].some((s) => s.released !== true && !this.#killedAt.has(s.process)))
      return true;
    for (const a of this.world.books.attempts) {
      if (a.answeredOkAtMs === undefined || this.#killedAt.has(a.process)) continue;
      const record = await observer.ledger.get(TENANT, a.key);
      if (record !== undefined && (record.status === 'started' || record.status === 'indeterminate'))
        return true;
    }
    return false;
  }

  #restarted(p: SimProcess): boolean {
    return this.#processes.some((q) => q.index === p.index && q !== p && q.alive);
  }

  async run(): Promise<ScheduleResult> {
    seedRandomness(this.plan.randomSeed);
    resetMintedIds();
    this.#armFaults();
    await this.#stores.reset();
    const observer = await this.#stores.observer();
    let steps = 0;
    let drainUntil: number | undefined;
    try {
      await this.world.loadMcpTools();
      this.#op = await this.#start(-1, 1, false);
      const op = this.#op.runtime!;
      const engine = this.#op.workflows;
      if (engine !== undefined) {
        await this.#alone(
          engine.start({
            tenantId: TENANT,
            workflow: 'payout',
            input: 'pay the order',
            workflowRunId: WORKFLOW_RUN_ID,
          }),
        );
      }
      for (let i = 0; i < this.plan.runs.length; i += 1) {
        await this.#alone(
          op.startRun({ tenantId: TENANT, agent: agentNameOf(i), input: `order ${i}`, runId: runIdOf(i) }),
        );
      }
      for (let i = 0; i < PROCESSES; i += 1) await this.#start(i, 1, true);
      this.#armOperator();
      while (steps < MAX_STEPS && this.#clock.now() - START_MS < HORIZON_MS) {
        await this.#settle();
        steps += 1;
        if (steps % 50 === 0 && this.#stores.realIo) await this.#stores.sync(this.#clock.now());
        if (steps % 50 === 0 && (await this.#quiet(observer))) {
          // Quiet, but a living process may still be finishing a wave (a hook it races, a slot it
          // holds for a call that may land): let it finish before the slots and outcomes are judged.
          const now = this.#clock.now() - START_MS;
          drainUntil ??= now + DRAIN_MS;
          if (now >= drainUntil || !(await this.#unfinished(observer))) break;
        }
        const open = this.#gates.filter((g) => g.process.alive && !g.process.frozen);
        if (open.length > 0) {
          const gate = open[this.#pick(open.length)]!;
          this.#gates.splice(this.#gates.indexOf(gate), 1);
          gate.process.gates += 1;
          const crash = this.plan.faults.find(
            (f): f is Extract<Fault, { kind: 'crash' }> =>
              f.kind === 'crash' &&
              f.process === gate.process.index &&
              f.atGate === gate.process.gates &&
              !this.#fired.has(f),
          );
          if (crash !== undefined) this.#fired.add(crash);
          if (crash !== undefined && !crash.after) {
            this.#kill(gate.process, `before ${gate.label}`);
            continue;
          }
          if (this.#stores.realIo) {
            // Killed as its call ends, before the result is handed back: the process never sees it.
            if (crash !== undefined) gate.afterCall = () => this.#kill(gate.process, `after ${gate.label}`);
            await this.#letThrough(gate);
          } else gate.open();
          if (crash !== undefined) this.#kill(gate.process, `after ${gate.label}`);
          continue;
        }
        if (!this.#clock.fireNext()) break;
      }
      for (const p of this.#processes) if (p.alive) p.alive = false; // every process stops here
      await this.#settle();
      if (this.#stores.realIo) await this.#stores.sync(this.#clock.now());
      const violations = await checkInvariants({
        store: observer,
        plan: this.plan,
        books: this.world.books,
        atHorizon: this.#clock.now() - START_MS >= HORIZON_MS || steps >= MAX_STEPS,
        livedOn: (name, fromMs) => this.#livedOn(name, fromMs),
        stalledAfter: (name, fromMs) => this.#stalledAfter(name, fromMs),
        slotsTaken: [...this.#slotsTaken.values()],
        startMs: START_MS,
      });
      return { violations, timeline: this.#timeline, steps, virtualMs: this.#clock.now() - START_MS };
    } finally {
      setCrashPointHook(undefined);
      // A store with a call still in flight (waiting on a timer that will never fire) is not kept.
      for (const p of this.#processes) {
        if (p.raw === undefined) continue;
        if (p.inFlight === 0 && !p.killed) await this.#stores.release(p.raw);
        else this.#stores.sever(p.raw);
      }
      await this.#stores.done();
    }
  }

  /** Before the workers start: `work`'s store calls go in the order they are made. */
  async #alone<T>(work: Promise<T>): Promise<T> {
    let done = false;
    const finished = work.finally(() => {
      done = true;
    });
    for (let i = 0; i < 1_000 && !done; i += 1) {
      await this.#settle();
      const gate = this.#gates.shift();
      if (gate !== undefined && this.#stores.realIo) await this.#letThrough(gate);
      else gate?.open();
    }
    return finished;
  }
}

/**
 * A migrated ledger, checkpointed into one file, that each schedule copies. Also loads the AI SDK,
 * which the runtime loads with its first model call (a dynamic import takes real time, which the
 * virtual clock cannot order): loaded first, every schedule replays exactly, the first one too.
 */
export async function makeTemplate(dir: string): Promise<string> {
  await aiRuntime();
  const path = join(dir, 'template.db');
  const store = await openStore(`sqlite:${path}`, { migrate: true });
  await store.close();
  const db = new Database(path);
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  return path;
}

/** A fresh ledger for a schedule: a copy of a migrated template file. */
export function freshLedger(template: string, dir: string, n: number): string {
  const path = join(dir, `s${n}.db`);
  for (const suffix of ['', '-wal', '-shm']) rmSync(path + suffix, { force: true });
  copyFileSync(template, path);
  return path;
}
