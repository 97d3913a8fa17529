import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ledger, executeToolCall, resolveToolCall, type ToolCallOutcome } from '../../src/calls/index.js';
import { reconcileRecord } from '../../src/calls/settlement.js';
import { ToolNotAttemptedError } from '../../src/errors/index.js';
import {
  argsDigest,
  type Actor,
  type JsonValue,
  type LedgerEvent,
  type LedgerStatus,
  type ToolExecutionRecord,
  type TransitionVia,
} from '../../src/ledger/index.js';
import { openStore, type ReserveRequest, type Store } from '../../src/store/index.js';
import { defineTool, external, type ReconcileOutcome } from '../../src/tools/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';

/*
 * A model-based test of the ledger: a pure in-memory model of every record (status, attempt,
 * version, result, who settled it, executions, the whole history) is run side by side with a real
 * store, driven through its public operations by several actors that hold possibly stale views.
 */

const RUN_ID = 'model';
const KEYS = ['k0', 'k1'] as const;
type CallId = (typeof KEYS)[number];
const WORKERS = ['worker-a', 'worker-b', 'worker-c'] as const;
const OPERATORS = ['ops-ana', 'ops-ben'] as const;
const TOOL_NAME = 'model_credit';
const ARGS = { amountCents: 2500 };
const OTHER_ARGS = { amountCents: 9900 };
const RECONCILE_ACTOR: Actor = { kind: 'reconcile', id: `hook:${TOOL_NAME}` };
const NUM_RUNS = 60;

/** Only used for its name and its reconcile hook's identity; the model never runs it. */
const MODEL_TOOL = defineTool({
  name: TOOL_NAME,
  description: 'credits an account (model test)',
  input: z.object({ amountCents: z.number().int() }),
  effect: external(),
  execute: () => {
    throw new Error('the model test never executes the tool');
  },
});

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

type Outcome = 'completed' | 'failed' | 'indeterminate';
type Settlement = 'completed' | 'failed';

interface EventShape {
  readonly kind: LedgerEvent['kind'];
  readonly from: LedgerStatus | null;
  readonly to: LedgerStatus | null;
  readonly via: TransitionVia | null;
  readonly attempt: number;
  readonly actor: Actor;
}

interface KeyModel {
  status: LedgerStatus | null;
  attempt: number;
  version: number;
  /** Reservations that handed the call to a caller: each one runs the tool once. */
  executions: number;
  result: JsonValue | null;
  settledBy: Actor | null;
  events: EventShape[];
}

/** What an actor saw of a record when it reserved (or moved) it: the basis of its compare-and-set. */
interface View {
  readonly owner: string;
  readonly status: LedgerStatus;
  readonly version: number;
  readonly attempt: number;
}

interface Model {
  readonly keys: Record<CallId, KeyModel>;
  /** Per worker and key: every view of an attempt this worker held, oldest first. */
  readonly held: Map<string, View[]>;
  /** Per worker and key: the last record this worker read or wrote. */
  readonly seen: Map<string, ToolExecutionRecord>;
}

interface Real {
  readonly store: Store;
  readonly ledger: Ledger;
  readonly tenantId: string;
  /** Times the real store answered `reserved`, per key. */
  readonly reserved: Record<CallId, number>;
}

/** The outcome edges DESIGN §4 allows, written out independently of src/ledger/transitions.ts. */
const OUTCOME_EDGES: Partial<Record<LedgerStatus, readonly Outcome[]>> = {
  started: ['completed', 'failed', 'indeterminate'],
  indeterminate: ['completed', 'failed'],
};

const isUnknown = (status: LedgerStatus | null): boolean =>
  status === 'started' || status === 'indeterminate';
const isSettled = (status: LedgerStatus | null): boolean =>
  status === 'completed' || status === 'failed' || status === 'compensated';
const key = (call: CallId): string => `${RUN_ID}:${call}`;
const slot = (worker: string, call: CallId): string => `${worker}|${call}`;
const runtime = (id: string): Actor => ({ kind: 'runtime', id });
const operator = (id: string): Actor => ({ kind: 'operator', id });

function emptyModel(): Model {
  const keyModel = (): KeyModel => ({
    status: null,
    attempt: 0,
    version: 0,
    executions: 0,
    result: null,
    settledBy: null,
    events: [],
  });
  return { keys: { k0: keyModel(), k1: keyModel() }, held: new Map(), seen: new Map() };
}

function modelReserve(km: KeyModel, actor: Actor): void {
  const from = km.status;
  km.attempt += 1;
  km.version += 1;
  km.status = 'started';
  km.executions += 1;
  km.result = null;
  km.settledBy = null;
  km.events.push({ kind: 'transition', from, to: 'started', via: 'reserve', attempt: km.attempt, actor });
}

function modelMove(
  km: KeyModel,
  to: LedgerStatus,
  via: TransitionVia,
  actor: Actor,
  result: JsonValue | null,
): void {
  km.events.push({ kind: 'transition', from: km.status, to, via, attempt: km.attempt, actor });
  km.status = to;
  km.version += 1;
  if (to === 'completed') km.result = result;
  if (isSettled(to)) km.settledBy = actor;
}

function modelAppend(
  km: KeyModel,
  kind: 'ignored' | 'note' | 'conflict',
  to: LedgerStatus | null,
  via: TransitionVia | null,
  actor: Actor,
  attempt = km.attempt,
): void {
  km.events.push({ kind, from: km.status, to, via, attempt, actor });
}

/**
 * An observation about `attempt` that lost its compare-and-set contradicts the record (DESIGN §4):
 * an effect that landed on a call settled failed or on a key re-opened since; a call found not taken
 * that is recorded as taken, at the same attempt; an attempt that ended not knowing after its call
 * was settled failed or re-opened without keys.
 */
function lossOf(
  km: KeyModel,
  to: Outcome | Settlement,
  attempt: number,
  keyed: boolean,
  via: 'outcome' | 'reconcile',
): 'conflict' | 'ignored' {
  if (to === 'completed' && km.status === 'failed') return 'conflict';
  // Two attempts of one key are one effect on a downstream that honours the key, two on one that does not.
  if (to === 'completed' && attempt < km.attempt && !keyed) return 'conflict';
  if (to === 'failed' && attempt === km.attempt && (km.status === 'completed' || km.status === 'compensated'))
    return 'conflict';
  // An attempt's own "not knowing", after its call was settled failed or re-opened without keys: it
  // outlived the deadline the others waited for, and may have landed.
  if (to === 'indeterminate' && via === 'outcome') {
    if (km.status === 'failed') return 'conflict';
    if (attempt < km.attempt && !keyed) return 'conflict';
  }
  return 'ignored';
}

/** Attempts of one key before a reconcile hook's `failed` no longer re-opens it (the ledger's default). */
const MAX_ATTEMPTS = 3;

const heldViews = (m: Model, worker: string, call: CallId): View[] => {
  let views = m.held.get(slot(worker, call));
  if (views === undefined) m.held.set(slot(worker, call), (views = []));
  return views;
};

/** Views of attempts older than the record's current one: their outcomes can only arrive late. */
const oldViews = (m: Model, call: CallId): View[] =>
  WORKERS.flatMap((w) => m.held.get(slot(w, call)) ?? []).filter((v) => v.attempt < m.keys[call].attempt);

const viewOf = (owner: string, record: ToolExecutionRecord): View => ({
  owner,
  status: record.status,
  version: record.version,
  attempt: record.attempt,
});

// ---------------------------------------------------------------------------------------------
// Invariants, checked against the real store after every command
// ---------------------------------------------------------------------------------------------

const shapeOf = (e: LedgerEvent): EventShape => ({
  kind: e.kind,
  from: e.from,
  to: e.to,
  via: e.via,
  attempt: e.attempt,
  actor: e.actor,
});

/** Properties of a history that hold whatever the model says. */
function assertHistoryChains(history: readonly LedgerEvent[], record: ToolExecutionRecord): void {
  const transitions = history.filter((e) => e.kind === 'transition');
  expect(transitions[0]).toMatchObject({ from: null, to: 'started', via: 'reserve', attempt: 1 });
  let status: LedgerStatus | null = null;
  let attempt = 0;
  for (const event of history) {
    if (event.kind !== 'transition') {
      // An ignored outcome, a conflict or a note changes nothing: it names the status the record had
      // then, and the attempt it is about (an outcome of an earlier attempt names that attempt).
      expect(event.from).toBe(status);
      expect(event.attempt).toBeLessThanOrEqual(attempt);
      continue;
    }
    expect(event.attempt).toBeGreaterThanOrEqual(attempt);
    expect(event.from).toBe(status);
    if (event.via === 'reserve') {
      // Never executing twice without a `failed` in between.
      expect(status === null || status === 'failed').toBe(true);
      expect(event.attempt).toBe(attempt + 1);
    } else {
      expect(event.attempt).toBe(attempt);
      // Only a compensation moves a settled record (completed → compensated).
      if (event.via !== 'compensate') expect(isSettled(status)).toBe(false);
    }
    status = event.to;
    attempt = event.attempt;
  }
  expect(status).toBe(record.status);
  expect(transitions.filter((e) => e.via === 'reserve')).toHaveLength(record.attempt);
  expect(transitions).toHaveLength(record.version);
}

async function checkInvariants(m: Model, r: Real): Promise<void> {
  const records = await r.store.ledger.list(r.tenantId, { limit: 50 });
  const present = KEYS.filter((call) => m.keys[call].status !== null).map(key);
  // No record lost, none made up.
  expect(records.map((rec) => rec.idempotencyKey).sort()).toEqual(present.sort());
  for (const call of KEYS) {
    const km = m.keys[call];
    if (km.status === null) continue;
    const record = records.find((rec) => rec.idempotencyKey === key(call));
    expect(record).toBeDefined();
    if (record === undefined) return;
    expect({
      status: record.status,
      attempt: record.attempt,
      version: record.version,
      result: record.result,
      settledBy: record.settledBy,
    }).toEqual({
      status: km.status,
      attempt: km.attempt,
      version: km.version,
      result: km.result,
      settledBy: km.settledBy,
    });
    expect(r.reserved[call]).toBe(km.executions);
    expect(km.executions).toBe(record.attempt);
    const history = await r.store.ledger.history(r.tenantId, key(call));
    expect(history.map(shapeOf)).toEqual(km.events);
    assertHistoryChains(history, record);
  }
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

type LedgerCommand = fc.AsyncCommand<Model, Real>;

function reserveRequest(tenantId: string, call: CallId, otherArgs: boolean): ReserveRequest {
  const args = otherArgs ? OTHER_ARGS : ARGS;
  return {
    tenantId,
    idempotencyKey: key(call),
    runId: RUN_ID,
    toolCallId: call,
    toolName: TOOL_NAME,
    effect: 'external',
    args,
    argsDigest: argsDigest(args),
    compensationOf: null,
    // The model's attempts can no longer land once reported (the ledger runs with no margin), so
    // the decision rules it models are the ones about status, version and attempts.
    attemptTimeoutMs: 0,
  };
}

/** A worker reserves the key; `otherArgs`: a replay with different arguments, which may never take it over. */
class ReserveCommand implements LedgerCommand {
  constructor(
    readonly worker: string,
    readonly call: CallId,
    readonly otherArgs: boolean,
  ) {}

  check(m: Readonly<Model>): boolean {
    return !this.otherArgs || m.keys[this.call].status !== null;
  }

  async run(m: Model, r: Real): Promise<void> {
    const km = m.keys[this.call];
    // A worker re-opens a key it saw `failed`, compare-and-set on the version it saw (maybe stale).
    const seen = m.seen.get(slot(this.worker, this.call));
    const reopenVersion = seen?.status === 'failed' ? seen.version : undefined;
    const expectReserved =
      !this.otherArgs && (km.status === null || (km.status === 'failed' && reopenVersion === km.version));
    const [result] = await r.store.ledger.reserve(
      [
        {
          ...reserveRequest(r.tenantId, this.call, this.otherArgs),
          ...(reopenVersion === undefined ? {} : { reopenVersion }),
        },
      ],
      runtime(this.worker),
    );
    expect(result?.kind).toBe(expectReserved ? 'reserved' : 'existing');
    if (result === undefined) return;
    if (result.kind === 'reserved') {
      r.reserved[this.call] += 1;
      modelReserve(km, runtime(this.worker));
      heldViews(m, this.worker, this.call).push(viewOf(this.worker, result.record));
    }
    expect({ status: result.record.status, version: result.record.version }).toEqual({
      status: km.status,
      version: km.version,
    });
    m.seen.set(slot(this.worker, this.call), result.record);
    await checkInvariants(m, r);
  }

  toString(): string {
    return `reserve(${this.worker}, ${this.call}${this.otherArgs ? ', other args' : ''})`;
  }
}

/** Records an outcome compare-and-set on a view; a stale view is ignored and appended as such. */
async function sendOutcome(
  m: Model,
  r: Real,
  call: CallId,
  view: View,
  to: Outcome,
  late: boolean,
): Promise<void> {
  const km = m.keys[call];
  const actor = runtime(view.owner);
  const value = { by: view.owner, attempt: view.attempt, version: view.version };
  const before = await r.store.ledger.get(r.tenantId, key(call));
  const request = {
    tenantId: r.tenantId,
    idempotencyKey: key(call),
    via: 'outcome' as const,
    to,
    expect: { status: view.status, version: view.version },
    actor,
    reason: late ? 'late outcome of the attempt that timed out' : null,
    ...(to === 'completed'
      ? { result: value, resultReference: `rcpt-${view.attempt}` }
      : { error: { code: 'DOWNSTREAM', message: `${to} (attempt ${view.attempt})` } }),
    recordIgnored: true,
    attempt: view.attempt,
  };
  if (!(OUTCOME_EDGES[view.status] ?? []).includes(to)) {
    // Not an edge of the table: refused before anything is written.
    await expect(r.store.ledger.transition(request)).rejects.toMatchObject({
      code: 'LEDGER_TRANSITION_REFUSED',
    });
  } else {
    const applies = km.status === view.status && km.version === view.version;
    const written = await r.store.ledger.transition(request);
    expect(written.applied).toBe(applies);
    if (applies) modelMove(km, to, 'outcome', actor, value);
    else modelAppend(km, lossOf(km, to, view.attempt, false, 'outcome'), to, 'outcome', actor, view.attempt);
    expect(!written.applied && written.conflict === true).toBe(
      !applies &&
        lossOf(km, to, view.attempt, false, 'outcome') === 'conflict' &&
        km.events.at(-1)?.kind === 'conflict',
    );
    if (applies && to === 'indeterminate' && written.record !== undefined) {
      heldViews(m, view.owner, call).push(viewOf(view.owner, written.record));
    }
    if (written.record !== undefined) m.seen.set(slot(view.owner, call), written.record);
  }
  if (before !== undefined && isSettled(before.status)) {
    // A settled record is never changed by an outcome, however late; a contradiction only marks it.
    const after = await r.store.ledger.get(r.tenantId, key(call));
    expect({ ...after, conflictAt: before.conflictAt }).toEqual(before);
    if (km.events.at(-1)?.kind === 'conflict') expect(after?.conflictAt).not.toBeNull();
  }
}

/** Workers that hold an attempt of the key: they are the ones with an outcome to report. */
const holders = (m: Readonly<Model>, call: CallId): string[] =>
  WORKERS.filter((w) => (m.held.get(slot(w, call)) ?? []).length > 0);

/** A worker reports what became of the attempt it holds (its latest view of the key). */
class OutcomeCommand implements LedgerCommand {
  constructor(
    readonly call: CallId,
    readonly pick: number,
    readonly to: Outcome,
  ) {}

  check(m: Readonly<Model>): boolean {
    return holders(m, this.call).length > 0;
  }

  async run(m: Model, r: Real): Promise<void> {
    const workers = holders(m, this.call);
    const worker = workers[this.pick % workers.length];
    const view = worker === undefined ? undefined : heldViews(m, worker, this.call).at(-1);
    if (view === undefined) throw new Error('check() guarantees a held view');
    await sendOutcome(m, r, this.call, view, this.to, false);
    await checkInvariants(m, r);
  }

  toString(): string {
    return `outcome(${this.call}, holder #${this.pick}, ${this.to})`;
  }
}

/** The late answer of an attempt older than the record's current one: it must change nothing. */
class LateOutcomeCommand implements LedgerCommand {
  constructor(
    readonly call: CallId,
    readonly pick: number,
    readonly to: Settlement,
  ) {}

  check(m: Readonly<Model>): boolean {
    return oldViews(m, this.call).length > 0;
  }

  async run(m: Model, r: Real): Promise<void> {
    const views = oldViews(m, this.call);
    const view = views[this.pick % views.length];
    if (view === undefined) throw new Error('check() guarantees an old view');
    await sendOutcome(m, r, this.call, view, this.to, true);
    await checkInvariants(m, r);
  }

  toString(): string {
    return `lateOutcome(${this.call}, #${this.pick}, ${this.to})`;
  }
}

/** The reconcile hook answers about the record as the worker last saw it (possibly stale). */
class ReconcileCommand implements LedgerCommand {
  constructor(
    readonly call: CallId,
    readonly pick: number,
    readonly answer: Settlement | 'unknown',
  ) {}

  /** Workers whose last look at the key found it unknown: the runtime asks the hook only then. */
  private askers(m: Readonly<Model>): string[] {
    return WORKERS.filter((w) => isUnknown(m.seen.get(slot(w, this.call))?.status ?? null));
  }

  check(m: Readonly<Model>): boolean {
    return this.askers(m).length > 0;
  }

  async run(m: Model, r: Real): Promise<void> {
    const askers = this.askers(m);
    const worker = askers[this.pick % askers.length] ?? '';
    const seen = m.seen.get(slot(worker, this.call));
    if (seen === undefined) throw new Error('check() guarantees a seen record');
    const km = m.keys[this.call];
    const value = { foundDownstream: true, version: seen.version };
    const answer: ReconcileOutcome =
      this.answer === 'completed'
        ? { status: 'completed', value, resultReference: 'rcpt-reconciled' }
        : this.answer === 'failed'
          ? { status: 'failed', reason: 'no such key downstream' }
          : { status: 'unknown', reason: 'downstream did not answer' };
    const record = await reconcileRecord(r.ledger, MODEL_TOOL, () => answer, seen);
    // A `failed` answer about a key that has had its attempts is only a note: an operator decides.
    const noted = this.answer === 'unknown' || (this.answer === 'failed' && seen.attempt >= MAX_ATTEMPTS);
    if (noted) modelAppend(km, 'note', null, null, RECONCILE_ACTOR);
    else if (km.status === seen.status && km.version === seen.version) {
      modelMove(km, this.answer, 'reconcile', RECONCILE_ACTOR, value);
    } else {
      const answered = this.answer;
      modelAppend(
        km,
        lossOf(km, answered, seen.attempt, MODEL_TOOL.downstreamAcceptsKey, 'reconcile'),
        answered,
        'reconcile',
        RECONCILE_ACTOR,
        seen.attempt,
      );
    }
    if (!noted)
      expect({ status: record.status, version: record.version }).toEqual({
        status: km.status,
        version: km.version,
      });
    m.seen.set(slot(worker, this.call), record);
    await checkInvariants(m, r);
  }

  toString(): string {
    return `reconcile(${this.call}, asker #${this.pick}, ${this.answer})`;
  }
}

/** An operator settles the call: allowed only while it is unknown; otherwise refused, nothing written. */
class ResolveCommand implements LedgerCommand {
  constructor(
    readonly operatorId: string,
    readonly call: CallId,
    readonly to: Settlement,
  ) {}

  check(): boolean {
    return true;
  }

  async run(m: Model, r: Real): Promise<void> {
    const km = m.keys[this.call];
    const result = { resolvedBy: this.operatorId };
    const resolve = (): Promise<ToolExecutionRecord> =>
      resolveToolCall(r.ledger, {
        tenantId: r.tenantId,
        idempotencyKey: key(this.call),
        status: this.to,
        reason: `checked the billing console: ${this.to}`,
        actorId: this.operatorId,
        ...(this.to === 'completed' ? { result } : {}),
      });
    if (km.status === null) {
      await expect(resolve()).rejects.toMatchObject({ code: 'LEDGER_RECORD_NOT_FOUND' });
    } else if (isUnknown(km.status)) {
      const record = await resolve();
      modelMove(km, this.to, 'resolve', operator(this.operatorId), result);
      expect({ status: record.status, version: record.version }).toEqual({
        status: km.status,
        version: km.version,
      });
    } else {
      const before = await r.store.ledger.get(r.tenantId, key(this.call));
      await expect(resolve()).rejects.toMatchObject({ code: 'LEDGER_ALREADY_SETTLED' });
      expect(await r.store.ledger.get(r.tenantId, key(this.call))).toEqual(before);
    }
    await checkInvariants(m, r);
  }

  toString(): string {
    return `resolve(${this.operatorId}, ${this.call}, ${this.to})`;
  }
}

const workerArb = fc.constantFrom(...WORKERS);
const callArb = fc.constantFrom(...KEYS);
const outcomeArb = fc.constantFrom<Outcome>('completed', 'failed', 'indeterminate');
const settlementArb = fc.constantFrom<Settlement>('completed', 'failed');
const rarely = fc.oneof(
  { weight: 9, arbitrary: fc.constant(false) },
  { weight: 1, arbitrary: fc.constant(true) },
);

const reserveArb = fc.tuple(workerArb, callArb, rarely).map(([w, c, o]) => new ReserveCommand(w, c, o));
const outcomeCmdArb = fc
  .tuple(callArb, fc.nat({ max: 5 }), outcomeArb)
  .map(([c, p, o]) => new OutcomeCommand(c, p, o));

const COMMANDS: fc.Arbitrary<LedgerCommand>[] = [
  // Listed twice: reservations and outcomes are what most of a ledger's life is made of.
  reserveArb,
  reserveArb,
  outcomeCmdArb,
  outcomeCmdArb,
  fc.tuple(callArb, fc.nat({ max: 20 }), settlementArb).map(([c, p, o]) => new LateOutcomeCommand(c, p, o)),
  fc
    .tuple(
      callArb,
      fc.nat({ max: 5 }),
      fc.constantFrom<Settlement | 'unknown'>('completed', 'failed', 'unknown'),
    )
    .map(([c, p, a]) => new ReconcileCommand(c, p, a)),
  fc
    .tuple(fc.constantFrom(...OPERATORS), callArb, settlementArb)
    .map(([o, c, s]) => new ResolveCommand(o, c, s)),
];

// ---------------------------------------------------------------------------------------------
// The stores
// ---------------------------------------------------------------------------------------------

interface Target {
  readonly name: 'sqlite' | 'postgres';
  /** Opens `connections` stores on one fresh database. */
  create(connections: number): Promise<{ stores: Store[]; cleanup(): Promise<void> }>;
}

const TARGETS: readonly Target[] = [
  {
    name: 'sqlite',
    async create(connections) {
      const file = tempSqlitePath('ledger-model');
      const stores: Store[] = [];
      // One connection per actor: each reads the others' commits from the shared file.
      for (let i = 0; i < connections; i++)
        stores.push(await openStore(`sqlite:${file.path}`, { migrate: true }));
      return {
        stores,
        async cleanup() {
          await Promise.all(stores.map((s) => s.close()));
          file.cleanup();
        },
      };
    },
  },
  {
    name: 'postgres',
    async create() {
      const db = await createTestDatabase('ledger-model');
      // One pool: concurrent callers get separate connections from it.
      const store = await openStore(db.url, { migrate: true });
      return {
        stores: [store],
        async cleanup() {
          await store.close();
          await db.drop();
        },
      };
    },
  },
];

let tenants = 0;
const freshTenant = (label: string): string =>
  `${label}-${process.pid}-${++tenants}-${Date.now().toString(36)}`;

describe.each(TARGETS)('the ledger against its model ($name)', (target) => {
  let stores: Store[] = [];
  let cleanup: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    const opened = await target.create(8);
    stores = opened.stores;
    cleanup = () => opened.cleanup();
  });

  afterAll(async () => {
    await cleanup?.();
  });

  it('matches the model under random interleavings of reserve, outcome, reconcile and resolve', async () => {
    const store = stores[0];
    if (store === undefined) throw new Error('no store');
    const ledger = new Ledger(store, { actorId: 'model-runtime', landingMarginMs: 0 });
    await fc.assert(
      fc.asyncProperty(fc.commands(COMMANDS, { maxCommands: 40, size: 'max' }), async (commands) => {
        const setup = (): { model: Model; real: Real } => ({
          model: emptyModel(),
          real: { store, ledger, tenantId: freshTenant(`model-${target.name}`), reserved: { k0: 0, k1: 0 } },
        });
        await fc.asyncModelRun(setup, commands);
      }),
      { numRuns: NUM_RUNS },
    );
    await ledger.drain();
  });

  it('gives each attempt exactly one execution when 8 callers race on one key', async () => {
    const ledgers = Array.from(
      { length: 8 },
      (_, i) => new Ledger(stores[i % stores.length] ?? (stores[0] as Store), { actorId: `racer-${i}` }),
    );
    const firstStore = stores[0] as Store;
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.constantFrom<Outcome>('failed', 'failed', 'completed', 'indeterminate'), {
          minLength: 8,
          maxLength: 8,
        }),
        fc.array(fc.nat({ max: 4 }), { minLength: 8, maxLength: 8 }),
        async (plan, delays) => {
          const tenantId = freshTenant(`race-${target.name}`);
          const executions = new Map<number, number>();
          const tool = defineTool({
            name: 'race_credit',
            description: 'credits an account; what each attempt does is planned by the test',
            input: z.object({ amountCents: z.number().int() }),
            effect: external(),
            async execute(_args, context) {
              executions.set(context.attempt, (executions.get(context.attempt) ?? 0) + 1);
              await sleep(delays[context.attempt - 1] ?? 0);
              const planned = plan[context.attempt - 1];
              if (planned === 'failed') throw new ToolNotAttemptedError('the account is locked');
              if (planned === 'indeterminate') throw new Error('connection reset after the request was sent');
              return { attempt: context.attempt, key: context.idempotencyKey };
            },
          });
          const outcomes: ToolCallOutcome[] = await Promise.all(
            ledgers.map(async (ledger, i) => {
              await sleep(delays[i] ?? 0);
              return executeToolCall(ledger, tool, ARGS, { tenantId, runId: 'race', toolCallId: 'call_1' });
            }),
          );

          const record = await firstStore.ledger.get(tenantId, 'race:call_1');
          expect(record).toBeDefined();
          if (record === undefined) return;
          const attempts = record.attempt;
          // Exactly one execution per attempt, and only as many attempts as reservations.
          expect([...executions.entries()].sort(([a], [b]) => a - b)).toEqual(
            Array.from({ length: attempts }, (_, i) => [i + 1, 1]),
          );
          // Every attempt but the last definitely failed: only that lets the key run again.
          expect(plan.slice(0, attempts - 1).every((p) => p === 'failed')).toBe(true);
          expect(record.status).toBe(plan[attempts - 1]);
          const executed = outcomes.filter((o) => o.status === 'completed' && o.source === 'executed');
          expect(executed).toHaveLength(record.status === 'completed' ? 1 : 0);
          for (const o of outcomes) {
            if (o.status === 'completed') expect(o.value).toEqual({ attempt: attempts, key: 'race:call_1' });
          }
          const history = await firstStore.ledger.history(tenantId, 'race:call_1');
          assertHistoryChains(history, record);
          expect(history.filter((e) => e.kind === 'ignored')).toEqual([]);
          expect(await firstStore.ledger.list(tenantId, { limit: 10 })).toHaveLength(1);
        },
      ),
      { numRuns: 30 },
    );
    await Promise.all(ledgers.map((l) => l.drain()));
  });
});
