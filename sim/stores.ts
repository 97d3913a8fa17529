import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import type { Store } from '../src/store/index.js';
import { SqliteStore } from '../src/store/sqlite/index.js';
import { realClock, type Clock, type ClockTimer } from '../src/util/clock.js';

/*
 * Where a schedule's processes get their stores. Each process has its own store (its own
 * connections) over one shared ledger, the operator's too, and the simulator has an observer's.
 * A store kept from one schedule to the next saves opening a database, setting it up and compiling
 * its statements again each time (most of a schedule's cost when each one opened five): its clock
 * is a `SwitchClock` pointed at the process that uses it now, and the ledger is emptied between
 * schedules. A killed process's store is never kept: its connections close at once, and its
 * restart gets another.
 */
export interface SimStores {
  /**
   * The calls are real I/O (PostgreSQL): the simulator waits for each call it lets through to end
   * before it chooses the next (else the order would be the network's), and sets the database's
   * time (`sync`) first. SQLite's calls run to their end on the same thread anyway.
   */
  readonly realIo: boolean;
  /** Makes the database's own time the virtual `nowMs` (PostgreSQL's `oncely_now()`). */
  sync(nowMs: number): Promise<void>;
  /** Empties the ledger before a schedule (a one-schedule ledger is empty already). */
  reset(): Promise<void>;
  /** The observer's store: reads for the quiet check and the invariants, on the machine's clock. */
  observer(): Promise<Store>;
  /** A process's store, its every time and timer on `clock`. */
  open(clock: Clock): Promise<Store>;
  /** The process died: its connections close at once (an open transaction rolls back, its locks go). */
  sever(store: Store): void;
  /** The schedule is over and the store has nothing in flight: kept for the next one, or closed. */
  release(store: Store): Promise<void>;
  /** The schedule is over: lets go of what only it used (a one-schedule ledger's observer). */
  done(): Promise<void>;
  /** Closes everything (after the last schedule). */
  close(): Promise<void>;
}

/** A clock that stands for another, changed per schedule: a kept store follows its new process. */
export class SwitchClock implements Clock {
  target: Clock = realClock;
  now(): number {
    return this.target.now();
  }
  setTimeout(fn: () => void, ms: number): ClockTimer {
    return this.target.setTimeout(fn, ms);
  }
  clearTimeout(timer: ClockTimer | undefined): void {
    this.target.clearTimeout(timer);
  }
  setInterval(fn: () => void, ms: number): ClockTimer {
    return this.target.setInterval(fn, ms);
  }
  clearInterval(timer: ClockTimer | undefined): void {
    this.target.clearInterval(timer);
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return this.target.sleep(ms, signal);
  }
  timeoutSignal(ms: number): AbortSignal {
    return this.target.timeoutSignal(ms);
  }
}

type Connections = Record<'reader' | 'writer', Database.Database | undefined>;
const connectionsOf = (store: Store): Connections => store as unknown as Connections;

/**
 * What the system does for a killed process: its database connections close at once, whatever it
 * was doing (an open transaction rolls back, its locks go). `close()` would wait for the work in
 * flight, which a dead process never finishes.
 */
export function severSqlite(store: Store): void {
  const { reader, writer } = connectionsOf(store);
  for (const db of [reader, writer]) if (db?.open === true) db.close();
}

/** One schedule's own SQLite file (a fresh copy of the template): every store opened anew. */
export class SqliteFile implements SimStores {
  readonly realIo = false;
  #observer: Store | undefined;
  constructor(readonly path: string) {}

  sync(): Promise<void> {
    return Promise.resolve();
  }

  reset(): Promise<void> {
    return Promise.resolve();
  }

  async observer(): Promise<Store> {
    this.#observer ??= await SqliteStore.open(this.path, { create: false });
    return this.#observer;
  }

  // Opened directly: `openStore` loads the driver with a dynamic import, whose time is real.
  open(clock: Clock): Promise<Store> {
    return SqliteStore.open(this.path, { clock, create: false });
  }

  sever(store: Store): void {
    severSqlite(store);
  }

  release(store: Store): Promise<void> {
    severSqlite(store);
    return Promise.resolve();
  }

  async done(): Promise<void> {
    await this.#observer?.close();
    this.#observer = undefined;
  }

  close(): Promise<void> {
    return this.done();
  }
}

/** Idle stores kept beyond this are closed (a schedule uses five at once, more with restarts). */
const MAX_IDLE = 8;

/**
 * Stores kept from one schedule to the next, each on a `SwitchClock` pointed at the process that
 * uses it now. A store is kept when it has nothing in flight (`reusable`) and fewer than
 * `MAX_IDLE` wait; otherwise it is severed. What differs per database is how a store is opened,
 * how it is cut, and what "nothing in flight" means.
 */
export abstract class KeptStores implements SimStores {
  abstract readonly realIo: boolean;
  readonly #idle: Store[] = [];
  readonly #clocks = new WeakMap<Store, SwitchClock>();
  #observer: Store | undefined;

  abstract sync(nowMs: number): Promise<void>;
  abstract reset(): Promise<void>;
  abstract sever(store: Store): void;
  /** A new store of this database, on `clock`. */
  protected abstract openNew(clock: Clock): Promise<Store>;
  /** The observer's store, on the machine's clock. */
  protected abstract openObserver(): Promise<Store>;
  /** Whether a store has nothing in flight and may serve the next schedule. */
  protected abstract reusable(store: Store): boolean;
  /** Closes what the database itself holds (after the stores). */
  protected abstract closeDatabase(): Promise<void>;

  async observer(): Promise<Store> {
    this.#observer ??= await this.openObserver();
    return this.#observer;
  }

  async open(clock: Clock): Promise<Store> {
    let store = this.#idle.pop();
    if (store === undefined) {
      const switchClock = new SwitchClock();
      store = await this.openNew(switchClock);
      this.#clocks.set(store, switchClock);
    }
    this.#clocks.get(store)!.target = clock;
    return store;
  }

  release(store: Store): Promise<void> {
    if (!this.reusable(store) || this.#idle.length >= MAX_IDLE) this.sever(store);
    else {
      this.#clocks.get(store)!.target = realClock;
      this.#idle.push(store);
    }
    return Promise.resolve();
  }

  done(): Promise<void> {
    return Promise.resolve();
  }

  async close(): Promise<void> {
    await Promise.all(this.#idle.splice(0).map((store) => this.closeKept(store)));
    await this.#observer?.close();
    this.#observer = undefined;
    await this.closeDatabase();
  }

  /** Closes an idle store at the end (nothing in flight). */
  protected closeKept(store: Store): Promise<void> {
    return store.close();
  }
}

/**
 * One SQLite file for every schedule, its stores kept from one schedule to the next. Between
 * schedules one script empties every table (the append-only tables' delete triggers are dropped and
 * made again in the same transaction, from the template's own text) and the AUTOINCREMENT counters,
 * so each schedule starts on the template's empty ledger with the same ids.
 */
export class SqlitePool extends KeptStores {
  readonly realIo = false;

  private constructor(
    readonly path: string,
    private readonly admin: Database.Database,
    private readonly resetScript: string,
  ) {
    super();
  }

  /** A copy of the migrated `template` in `dir`, and the script that empties it. */
  static create(template: string, dir: string): SqlitePool {
    const path = join(dir, 'pool.db');
    copyFileSync(template, path);
    const admin = new Database(path, { timeout: 0 });
    admin.pragma('journal_mode = WAL');
    admin.pragma('foreign_keys = OFF');
    admin.unsafeMode(true);
    return new SqlitePool(path, admin, resetScriptOf(admin));
  }

  sync(): Promise<void> {
    return Promise.resolve();
  }

  reset(): Promise<void> {
    const cookie = this.admin.pragma('schema_version', { simple: true }) as number;
    this.admin.exec(this.resetScript);
    this.admin.pragma(`schema_version = ${cookie}`);
    this.admin.exec('COMMIT');
    return Promise.resolve();
  }

  sever(store: Store): void {
    severSqlite(store);
  }

  protected openNew(clock: Clock): Promise<Store> {
    return SqliteStore.open(this.path, { clock, create: false });
  }

  protected openObserver(): Promise<Store> {
    return SqliteStore.open(this.path, { create: false });
  }

  protected reusable(store: Store): boolean {
    const { writer } = connectionsOf(store);
    return writer?.open === true && !writer.inTransaction;
  }

  protected override closeKept(store: Store): Promise<void> {
    severSqlite(store);
    return Promise.resolve();
  }

  protected closeDatabase(): Promise<void> {
    this.admin.close();
    return Promise.resolve();
  }
}

/** DROP TRIGGER …; DELETE FROM each table; the counters; CREATE TRIGGER … — in one transaction. */
function resetScriptOf(db: Database.Database): string {
  const objects = db
    .prepare<[], { type: string; name: string; sql: string | null }>(
      `SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'trigger') ORDER BY type, name`,
    )
    .all();
  const quote = (name: string) => `"${name.replaceAll('"', '""')}"`;
  const tables = objects.filter(
    (o) => o.type === 'table' && o.name !== 'schema_migrations' && !o.name.startsWith('sqlite_'),
  );
  const triggers = objects.filter((o) => o.type === 'trigger');
  for (const table of tables) {
    const row = db.prepare(`SELECT 1 FROM ${quote(table.name)} LIMIT 1`).get();
    if (row !== undefined) throw new Error(`the template's table ${table.name} is not empty`);
  }
  const hasSequence = objects.some((o) => o.name === 'sqlite_sequence');
  return [
    'BEGIN IMMEDIATE',
    ...triggers.map((t) => `DROP TRIGGER ${quote(t.name)}`),
    ...tables.map((t) => `DELETE FROM ${quote(t.name)}`),
    ...(hasSequence ? ['DELETE FROM sqlite_sequence'] : []),
    ...triggers.map((t) => t.sql!),
  ].join(';\n');
}

/** A process's clock as its store sees it, telling `onTimer` each time the store sets a timer. */
export class WatchedClock extends SwitchClock {
  constructor(
    target: Clock,
    private readonly onTimer: () => void,
  ) {
    super();
    this.target = target;
  }
  override setTimeout(fn: () => void, ms: number): ClockTimer {
    this.onTimer();
    return super.setTimeout(fn, ms);
  }
  override setInterval(fn: () => void, ms: number): ClockTimer {
    this.onTimer();
    return super.setInterval(fn, ms);
  }
  override sleep(ms: number, signal?: AbortSignal): Promise<void> {
    const slept = super.sleep(ms, signal);
    this.onTimer();
    return slept;
  }
}
