import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LanguageModelV3Prompt } from '@ai-sdk/provider';
import { defineAgent, type Agent, type OnIndeterminate } from '../../src/agents/index.js';
import { Ledger, executeToolCalls } from '../../src/calls/index.js';
import { isOncelyError } from '../../src/errors/index.js';
import type { JsonValue, LedgerEvent, RepeatPolicy } from '../../src/ledger/index.js';
import { scriptedModel, type Script, type ScriptedModel } from '../../src/models/index.js';
import type { RunRecord } from '../../src/run-state/index.js';
import { Runtime, type RecoveredRun } from '../../src/runs/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import type { Tool } from '../../src/tools/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';
import type { CountedTool } from './tools.js';

/*
 * Shared fixtures of the run-loop tests: both stores (a real SQLite file and a real PostgreSQL
 * database, one per test file), agents with a scripted model, runtimes closed after each test, a dead
 * worker's leftovers, and helpers to read what the scripted model heard. The downstream service and
 * the tools are in ./tools.ts.
 */

export const TENANT = 'acme';
export const OPERATOR = 'ops-ana';

export interface OpenedStore {
  readonly url: string;
  readonly store: Store;
  /** A second connection to the same database (to lose it, as a worker that dies does). */
  openAnother(): Promise<Store>;
  /**
   * What a second runtime in this process shares the database through, to race the first: a second
   * pool on PostgreSQL; on SQLite the same connection, as one process should use a SQLite file (two
   * connections in one process stall in the driver's synchronous busy wait).
   */
  openPeer(): Promise<{ store: Store; close(): Promise<void> }>;
  cleanup(): Promise<void>;
}

export const STORES: [string, (label: string) => Promise<OpenedStore>][] = [
  [
    'sqlite',
    async (label) => {
      const file = tempSqlitePath(label);
      const url = `sqlite:${file.path}`;
      const store = await openStore(url, { migrate: true });
      return {
        url,
        store,
        openAnother: () => openStore(url),
        openPeer: () => Promise.resolve({ store, close: () => Promise.resolve() }),
        cleanup: async () => (await store.close(), file.cleanup()),
      };
    },
  ],
  [
    'postgres',
    async (label) => {
      const db = await createTestDatabase(label);
      const store = await openStore(db.url, { migrate: true });
      return {
        url: db.url,
        store,
        openAnother: () => openStore(db.url),
        openPeer: async () => {
          const peer = await openStore(db.url);
          return { store: peer, close: () => peer.close() };
        },
        cleanup: async () => (await store.close(), await db.drop()),
      };
    },
  ],
];

let seq = 0;
/** A run id unique within the database. */
export const newRunId = (label = 'run'): string => `${label}_${randomBytes(4).toString('hex')}_${++seq}`;

export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** Polls `check` until it is true (or fails the test after `timeoutMs`). */
export async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await sleep(10);
  }
}

/** The error code a promise rejects with, `(no error)`, or a description of a non-oncely error. */
export async function codeOf(work: () => Promise<unknown>): Promise<string> {
  try {
    await work();
  } catch (error) {
    return isOncelyError(error) ? error.code : `not an OncelyError: ${String(error)}`;
  }
  return '(no error)';
}

export interface AgentOptions {
  readonly name?: string;
  readonly onIndeterminate?: OnIndeterminate;
  readonly onRepeat?: RepeatPolicy;
  readonly maxSteps?: number;
}

/** An agent with a scripted model; the model is returned to read what it heard. */
export function scriptedAgent(
  script: Script,
  tools: readonly (Tool | CountedTool)[],
  options: AgentOptions = {},
): { agent: Agent; model: ScriptedModel } {
  const model = scriptedModel(script);
  const agent = defineAgent({
    // A name of its own: `recover()` claims every free run of its agents, so tests must not share one.
    name: options.name ?? `billing_${++seq}`,
    instructions: 'You help with billing.',
    model,
    tools: tools.map((t) => ('tool' in t ? t.tool : t)),
    toolPolicy: {
      ...(options.onIndeterminate === undefined ? {} : { onIndeterminate: options.onIndeterminate }),
      ...(options.onRepeat === undefined ? {} : { onRepeat: options.onRepeat }),
    },
    ...(options.maxSteps === undefined ? {} : { maxSteps: options.maxSteps }),
  });
  return { agent, model };
}

/** Runtimes (and extra connections) opened by a test, closed after it, so none is left running. */
export class Runtimes {
  readonly #open: Runtime[] = [];
  readonly #after: (() => Promise<void>)[] = [];

  /** Runs `close` after the runtimes are closed. */
  defer(close: () => Promise<void>): void {
    this.#after.push(close);
  }

  open(
    store: Store,
    agents: readonly Agent[],
    options: {
      owner?: string;
      leaseMs?: number;
      reconcileEveryMs?: number;
      reconcilePerSweep?: number;
      landingMarginMs?: number;
      maxDriveAttempts?: number;
      retryBaseMs?: number;
    } = {},
  ): Runtime {
    const runtime = new Runtime(store, {
      agents,
      owner: options.owner ?? `test-${this.#open.length + 1}`,
      leaseMs: options.leaseMs ?? 5_000,
      // No margin unless a test asks for one: an attempt that stopped at its timeout cannot land.
      landingMarginMs: options.landingMarginMs ?? 0,
      ...(options.maxDriveAttempts === undefined ? {} : { maxDriveAttempts: options.maxDriveAttempts }),
      ...(options.retryBaseMs === undefined ? {} : { retryBaseMs: options.retryBaseMs }),
      ...(options.reconcileEveryMs === undefined ? {} : { reconcileEveryMs: options.reconcileEveryMs }),
      ...(options.reconcilePerSweep === undefined ? {} : { reconcilePerSweep: options.reconcilePerSweep }),
    });
    this.#open.push(runtime);
    return runtime;
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.#open.splice(0).map((r) => r.close()));
    for (const close of this.#after.splice(0)) await close();
  }
}

/** Starts a run and drives it until it waits or ends. */
export async function startAndDrive(runtime: Runtime, input: string, agent?: string): Promise<RunRecord> {
  const name = agent ?? [...runtime.agents.keys()][0] ?? '';
  const { run } = await runtime.startRun({ tenantId: TENANT, agent: name, input, runId: newRunId() });
  return runtime.drive(TENANT, run.runId);
}

/** The tool calls of the run's checkpoint, in order: the ids the runtime minted. */
export function callIdsOf(run: RunRecord): string[] {
  const ids: string[] = [];
  for (const message of run.checkpoint.messages as { role: string; content: unknown }[]) {
    if (message.role !== 'assistant' || !Array.isArray(message.content)) continue;
    for (const part of message.content as { type: string; toolCallId?: string }[]) {
      if (part.type === 'tool-call' && part.toolCallId !== undefined) ids.push(part.toolCallId);
    }
  }
  return ids;
}

export const keyOf = (run: RunRecord, toolCallId: string): string => `${run.runId}:${toolCallId}`;

/** The keys of a credit-and-owner step's two pending calls (`creditAndOwnerSteps`), in that order. */
export function creditAndOwnerKeys(run: RunRecord): [creditKey: string, ownerKey: string] {
  const [credit, owner, ...more] = callIdsOf(run).map((id) => keyOf(run, id));
  if (credit === undefined || owner === undefined || more.length > 0) {
    throw new Error(`run ${run.runId} does not hold one credit and one owner call`);
  }
  return [credit, owner];
}

export interface HeardPart {
  readonly toolCallId: string;
  readonly toolName: string;
  readonly output: unknown;
}

/** Every tool result in a prompt, in order: what the model heard. */
export function toolResultsIn(prompt: LanguageModelV3Prompt | undefined): HeardPart[] {
  const parts: HeardPart[] = [];
  for (const message of prompt ?? []) {
    if (message.role !== 'tool') continue;
    for (const part of message.content) {
      if (part.type === 'tool-result') {
        parts.push({ toolCallId: part.toolCallId, toolName: part.toolName, output: part.output });
      }
    }
  }
  return parts;
}

/** The tool-call ids in a prompt's assistant messages. */
export function toolCallIdsIn(prompt: LanguageModelV3Prompt | undefined): string[] {
  const ids: string[] = [];
  for (const message of prompt ?? []) {
    if (message.role !== 'assistant') continue;
    for (const part of message.content) if (part.type === 'tool-call') ids.push(part.toolCallId);
  }
  return ids;
}

/** The last prompt the model received. */
export const lastPrompt = (model: ScriptedModel): LanguageModelV3Prompt | undefined =>
  model.received[model.received.length - 1];

/** `kind:via:from->to` for each ledger event: a history that reads at a glance. */
export function summary(history: readonly LedgerEvent[]): string[] {
  return history.map((e) => `${e.kind}:${e.via ?? '-'}:${e.from ?? '-'}->${e.to ?? '-'}`);
}

/** Event types of a run, in order. */
export async function eventTypes(store: Store, runId: string): Promise<string[]> {
  return (await store.runs.events(TENANT, runId, 0, 1_000)).map((e) => e.type);
}

/** Waits until the run's lease has expired (its driver died), by the clock of this process. */
export async function untilLeaseExpired(store: Store, runId: string): Promise<void> {
  const run = await store.runs.get(TENANT, runId);
  const expires = run?.leaseExpiresAt === null || run === undefined ? 0 : Date.parse(run.leaseExpiresAt);
  const wait = expires - Date.now() + 25;
  if (wait > 0) await sleep(wait);
}

/** The notes the model hears, word for word (docs/runs.md shows them); a change of wording fails the tests. */
export const NOTE = {
  replayed: 'This call had already taken effect; this is its recorded result. It was not run again.',
  notAttempted:
    'The tool refused before sending anything, so this call did not take effect. It is safe to call again once the cause is fixed.',
  didNotTakeEffect: 'This call did not take effect: nothing was changed.',
  compensated:
    'This call took effect, and was then undone by an operator (compensated). Its effect no longer stands.',
  rejected: 'An operator rejected this call at approval, so it was not run and nothing was changed.',
  invalidCall: 'This call was not run: it could not be made as given. Nothing was changed.',
  readFailed: 'This lookup failed on every try. It changed nothing.',
  settledCompleted:
    'An operator checked the downstream system and settled this call: it took effect. Do not make it again.',
  tookEffect:
    'Correction: this call was settled as not taken effect, but its effect then landed. It did take effect. Do not make it again.',
} as const;

export interface SeededCall {
  readonly tool: Tool;
  readonly input: Record<string, JsonValue>;
}

/**
 * Leaves a run as a worker leaves it that died in the middle of a step: the model response, with ids
 * minted for its calls, is in the checkpoint (step 1, calls pending) and the lease has expired. With
 * `execute`, the worker had also run the calls through the guarded call and recorded their outcomes
 * (as a driver does whose checkpoint write was then fenced out). Built through the store.
 */
export async function seedDeadWorkerStep(
  runtime: Runtime,
  agent: string,
  calls: readonly SeededCall[],
  options: { execute: boolean },
): Promise<{ runId: string; toolCallIds: string[]; keys: string[] }> {
  const store = runtime.store;
  const input = 'Please sort out my account.';
  const { run } = await runtime.startRun({ tenantId: TENANT, agent, input, runId: newRunId('dead') });
  const claimed = await store.runs.claim(TENANT, run.runId, 'dead-worker', 1);
  if (claimed === undefined) throw new Error('could not claim the seeded run');
  const toolCallIds = calls.map(() => `call_${randomBytes(8).toString('hex')}`);
  const pending = calls.map((c, i) => ({
    toolCallId: toolCallIds[i] ?? '',
    toolName: c.tool.name,
    input: c.input,
  }));
  const saved = await store.runs.saveCheckpoint({
    fence: {
      tenantId: TENANT,
      runId: run.runId,
      leaseEpoch: claimed.leaseEpoch,
      checkpointVersion: claimed.checkpointVersion,
    },
    checkpoint: {
      messages: [
        { role: 'user', content: input },
        { role: 'assistant', content: pending.map((p) => ({ type: 'tool-call', ...p })) },
      ],
      step: 1,
      pending: { calls: pending },
    },
    storedMessages: claimed.checkpoint.messages.length,
    status: 'running',
  });
  if (saved === undefined) throw new Error('could not save the seeded checkpoint');
  if (options.execute) {
    const ledger = new Ledger(store, { actorId: 'dead-worker' });
    await executeToolCalls(
      ledger,
      calls.map((c, i) => ({
        tenantId: TENANT,
        runId: run.runId,
        toolCallId: toolCallIds[i] ?? '',
        tool: c.tool,
        args: c.input,
      })),
    );
  }
  await untilLeaseExpired(store, run.runId);
  return { runId: run.runId, toolCallIds, keys: toolCallIds.map((id) => `${run.runId}:${id}`) };
}

/**
 * A second connection to the database that a test loses in the middle of a step, as a worker that
 * dies loses its database: every write after `lose()` fails. Closed after the test if still open.
 */
export async function doomedConnection(
  opened: OpenedStore,
  runtimes: Runtimes,
): Promise<{ store: Store; arm(armed: boolean): void; loseIfArmed(): Promise<void> }> {
  const store = await opened.openAnother();
  let armed = false;
  let lost = false;
  const lose = async (): Promise<void> => {
    if (lost) return;
    lost = true;
    await store.close();
  };
  runtimes.defer(lose);
  return {
    store,
    arm: (value) => (armed = value),
    loseIfArmed: () => (armed ? lose() : Promise.resolve()),
  };
}

/**
 * Recovers, and when a run was released because a dead driver's attempt might still land (younger
 * than its tool's timeout), waits until it can no longer land and recovers again. Returns the drives
 * of the last pass, after asserting the first pass ran nothing of the waiting runs.
 */
export async function recoverWhenLanded(runtime: Runtime): Promise<RecoveredRun[]> {
  let recovered = await runtime.recover();
  for (let pass = 0; pass < 3; pass++) {
    const waits = recovered.flatMap((r) => (r.end.kind === 'released' ? [r.end.delayMs] : []));
    if (waits.length === 0) return recovered;
    await sleep(Math.max(...waits) + 20);
    recovered = await runtime.recover();
  }
  return recovered;
}
