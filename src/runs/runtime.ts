import { hostname } from 'node:os';
import type { Agent } from '../agents/index.js';
import {
  Ledger,
  type CompensateRequest,
  type CompensationOutcome,
  type ResolveRequest,
} from '../calls/index.js';
import { errorInfo } from '../errors/index.js';
import { assertTenantId, isValidId, type ToolExecutionRecord } from '../ledger/index.js';
import type { ApprovalRecord, RunRecord, RunSummary, RunTurn } from '../run-state/index.js';
import {
  openStore,
  type CreateRunRequest,
  type Store,
  type TenantUsage,
  type UsageFilter,
  type WaitingCursor,
} from '../store/index.js';
import type { Tool } from '../tools/index.js';
import { realClock, type Clock } from '../util/clock.js';
import type { UiMessage } from './conversation.js';
import { decideApproval, type ApprovalDecision } from './decisions.js';
import { DEFAULT_RETRY_BASE_MS, type DriveEnd } from './drive-end.js';
import { RunDriver } from './driver.js';
import { DEFAULT_RECONCILE_EVERY_MS, ReconcileSweepState, reconcileUnknownCalls } from './reconcile-sweep.js';
import { sweepWaiting } from './resume.js';
import { failExhausted, releaseFailedDrive, type RecoveredRun } from './runtime-drives.js';
import {
  askHookNow,
  resolveTogether,
  type HookAsked,
  type ResolveTogetherRequest,
  type ResolvedTogether,
} from './operator-calls.js';
import { cancelRun, compensateCall, resolveCall, retryRun } from './runtime-operator.js';
import {
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_DRIVE_ATTEMPTS,
  agentNamed,
  indexAgents,
  indexTools,
  type RuntimeOptions,
} from './runtime-options.js';
import { findRun, findRunSummary, runTurns, runUiMessages, tenantUsage } from './runtime-queries.js';
import { sendMessage, type SendMessage, type SentMessage } from './runtime-send.js';
import { createRun, newRunRequest, type StartRunRequest } from './runtime-start.js';
import { DeltaBus } from './stream-deltas.js';

/**
 * The durable agent runtime: starts runs, drives them, recovers those whose driver died, and takes
 * operators' decisions (approve, reject, resolve, compensate, cancel), resuming a run once nothing
 * holds it. Any number of runtimes, in any number of processes, may share one PostgreSQL store.
 *
 * @example
 * const runtime = await openRuntime({ databaseUrl: 'sqlite:.oncely/oncely.db', agents: [billing] });
 * const { run } = await runtime.startRun({ tenantId: 'acme', agent: 'billing', input: 'Credit acct_7 $25' });
 * console.log((await runtime.drive('acme', run.runId)).status);
 */
export class Runtime {
  readonly ledger: Ledger;
  readonly agents: ReadonlyMap<string, Agent>;
  readonly tools: ReadonlyMap<string, Tool>;
  readonly owner: string;
  readonly leaseMs: number;
  readonly maxDriveAttempts: number;
  readonly retryBaseMs: number;
  readonly onModelResponse: RuntimeOptions['onModelResponse'];
  readonly onRepeat: RuntimeOptions['onRepeat'];
  readonly clock: Clock;
  readonly #ownsStore: boolean;
  readonly #reconcileEveryMs: number;
  readonly #reconcileMaxWaitMs: number | undefined;
  readonly #reconcilePerSweep: number | undefined;
  readonly #reconcileSweep = new ReconcileSweepState();
  readonly #sweepCursors = new Map<string, WaitingCursor>();
  readonly #drives = new Set<Promise<DriveEnd>>();
  /** The drivers of the drives in flight, for `releaseDriven`. */
  readonly #drivers = new Set<RunDriver>();
  #closed = false;
  #handingOff = false;
  /**
   * The deltas of the model responses this runtime streams (agents with `stream: true`), as they
   * arrive: what an API server in this process streams to its clients (other processes hear them
   * through the store's wake-ups).
   */
  readonly deltas = new DeltaBus();

  constructor(store: Store, options: RuntimeOptions & { ownsStore?: boolean }) {
    this.owner = options.owner ?? `${hostname()}:${process.pid}`;
    this.clock = options.clock ?? realClock;
    this.ledger = new Ledger(store, {
      actorId: this.owner,
      clock: this.clock,
      ...(options.random === undefined ? {} : { random: options.random }),
      ...(options.landingMarginMs === undefined ? {} : { landingMarginMs: options.landingMarginMs }),
      ...(options.maxAttemptsPerCall === undefined ? {} : { maxAttempts: options.maxAttemptsPerCall }),
      ...(options.log === undefined ? {} : { log: options.log }),
      ...(options.toolSlotLeaseMs === undefined ? {} : { toolSlotLeaseMs: options.toolSlotLeaseMs }),
    });
    this.maxDriveAttempts = options.maxDriveAttempts ?? DEFAULT_MAX_DRIVE_ATTEMPTS;
    this.retryBaseMs = options.retryBaseMs ?? DEFAULT_RETRY_BASE_MS;
    this.onModelResponse = options.onModelResponse;
    this.onRepeat = options.onRepeat;
    this.agents = indexAgents(options.agents);
    this.tools = indexTools([...options.agents.flatMap((a) => a.tools), ...(options.tools ?? [])]);
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.#ownsStore = options.ownsStore ?? false;
    this.#reconcileEveryMs = options.reconcileEveryMs ?? DEFAULT_RECONCILE_EVERY_MS;
    this.#reconcileMaxWaitMs = options.reconcileMaxWaitMs;
    this.#reconcilePerSweep = options.reconcilePerSweep;
  }

  get store(): Store {
    return this.ledger.store;
  }

  /** Creates a queued run (once per `runId`); a worker, `drive()` or `recover()` drives it. */
  async startRun(request: StartRunRequest): Promise<{ created: boolean; run: RunRecord }> {
    return createRun(this.store, this.agents, request, undefined);
  }

  /**
   * Starts a run and drives it here until it waits or ends, and returns it as it then stands:
   * `startRun` then `drive`, one write less (the run is created already claimed by this runtime, its
   * events as theirs). A `runId` that exists (with the same agent and input) is driven as `drive`
   * drives it.
   *
   * @example
   * const run = await runtime.run({ tenantId: 'acme', agent: 'billing', input: 'Credit acct_7 $25' });
   * console.log(run.status); // 'completed', or a wait: 'awaiting_approval', 'awaiting_reconciliation'
   */
  async run(request: StartRunRequest): Promise<RunRecord> {
    const { created, run } = await createRun(this.store, this.agents, request, {
      owner: this.owner,
      leaseMs: this.leaseMs,
    });
    if (!created) return this.drive(run.tenantId, run.runId);
    await this.driveClaimed(run);
    return this.getRun(run.tenantId, run.runId);
  }

  /**
   * What creating a run writes, checked (tenant, agent, run id, input, budget) but not written: for
   * a caller that creates the run inside its own transaction (a workflow starting a node's run).
   */
  newRun(request: StartRunRequest & { runId: string }): CreateRunRequest {
    return newRunRequest(this.agents, request);
  }

  /** The run with its whole conversation (`checkpoint.messages`). */
  getRun(tenantId: string, runId: string): Promise<RunRecord> {
    return findRun(this.store, tenantId, runId);
  }

  /**
   * Sends the next user message to a run that has answered (`completed`): it is appended to the
   * conversation and the run is queued for its next turn, in one write; a worker, `drive()` or
   * `recover()` drives the turn with the same durability, ordering and keys as the first. The same
   * `clientMessageId` again is that turn (`sent: false`); with another message it is
   * `RUN_MESSAGE_CONFLICT`. A run that has not answered (or failed, or was cancelled) refuses with
   * `RUN_NOT_AWAITING_MESSAGE`.
   *
   * @example
   * await runtime.send({ tenantId: 'acme', runId, content: 'And the other order?', clientMessageId: 'm-2' });
   * const run = await runtime.drive('acme', runId);
   */
  send(request: SendMessage): Promise<SentMessage> {
    return sendMessage(this.store, request);
  }

  /** A run's later turns: each message sent to it, with its client id and place in the conversation. */
  turns(tenantId: string, runId: string): Promise<RunTurn[]> {
    return runTurns(this.store, tenantId, runId);
  }

  /** A run's conversation as AI SDK UI messages (what `useChat` renders). */
  uiMessages(tenantId: string, runId: string): Promise<UiMessage[]> {
    return runUiMessages(this.store, tenantId, runId);
  }

  /** What a tenant's runs created in the window cost, in all and by agent. */
  usage(tenantId: string, filter: UsageFilter = {}): Promise<TenantUsage> {
    return tenantUsage(this.store, tenantId, filter);
  }

  /** The run without its conversation: status, step, pending calls, lease; one row however long the run. */
  getRunSummary(tenantId: string, runId: string): Promise<RunSummary> {
    return findRunSummary(this.store, tenantId, runId);
  }

  /**
   * Claims this run if it is free (queued, or its driver's lease expired) and drives it until it
   * waits or ends; returns the run as it then stands. A run held by a live driver is left alone.
   */
  async drive(tenantId: string, runId: string): Promise<RunRecord> {
    assertTenantId(tenantId);
    const claimed = isValidId(runId)
      ? await this.store.runs.claim(tenantId, runId, this.owner, this.leaseMs, [...this.agents.keys()])
      : undefined;
    if (claimed === undefined) {
      // Not claimed: no such run, a run of an agent this runtime does not have, or one held or ended.
      const run = await this.getRun(tenantId, runId);
      this.agentNamed(run.agent);
      return run;
    }
    await this.driveClaimed(claimed);
    return this.getRun(tenantId, runId);
  }

  /**
   * Drives a run this process has claimed. A run whose drives keep failing ends `failed` with
   * `RUN_RETRIES_EXCEEDED` once it is claimed past `maxDriveAttempts`; a drive that throws releases
   * the run to be claimed again after a backoff, recording its error, and rethrows.
   */
  async driveClaimed(run: RunRecord): Promise<DriveEnd> {
    if (this.#closed) throw new Error('the runtime is closed');
    const drive = this.#driveOnce(run);
    this.#drives.add(drive);
    try {
      return await drive;
    } finally {
      this.#drives.delete(drive);
    }
  }

  async #driveOnce(run: RunRecord): Promise<DriveEnd> {
    if (run.driveAttempts > this.maxDriveAttempts) {
      return failExhausted(this.store, this.maxDriveAttempts, run);
    }
    const driver = new RunDriver(
      {
        ledger: this.ledger,
        agent: this.agentNamed(run.agent),
        owner: this.owner,
        leaseMs: this.leaseMs,
        retryBaseMs: this.retryBaseMs,
        ...(this.onModelResponse === undefined ? {} : { onModelResponse: this.onModelResponse }),
        ...(this.onRepeat === undefined ? {} : { onRepeat: this.onRepeat }),
        handingOff: () => this.#handingOff,
        deltas: this.deltas,
      },
      run,
    );
    this.#drivers.add(driver);
    try {
      return await driver.drive();
    } catch (error) {
      await releaseFailedDrive(this.store, this, run, error);
      throw error;
    } finally {
      this.#drivers.delete(driver);
    }
  }

  /**
   * For a process that is stopping: every run this runtime drives lets go at its next step boundary,
   * released to be claimed by another process at once (event `run.released`, cause `shutdown`).
   */
  handOff(): void {
    this.#handingOff = true;
  }

  /**
   * For a process past its grace: lets go of the runs still being driven, mid-step, so another
   * process claims them at once instead of after their lease expires (see `RunDriver.letGo`).
   * Returns how many were released.
   */
  async releaseDriven(reason: string): Promise<number> {
    const released = await Promise.all([...this.#drivers].map((driver) => driver.letGo(reason)));
    return released.filter(Boolean).length;
  }

  /**
   * An operator re-drives a `failed` run from its last checkpoint (reason required): it is queued
   * again with its counters cleared. Keys stay stable, so completed calls replay and unknown calls
   * are asked of their hooks; nothing that took effect runs again.
   */
  retry(tenantId: string, runId: string, request: { reason: string; actorId: string }): Promise<RunRecord> {
    return retryRun(this.store, tenantId, runId, request);
  }

  /** Claims the oldest free run of this runtime's agents, or undefined when there is none. */
  claimNext(): Promise<RunRecord | undefined> {
    return this.store.runs.claimNext(this.owner, this.leaseMs, [...this.agents.keys()]);
  }

  /**
   * Recovery: requeues waiting runs nothing holds any more, then claims every free run — queued, or
   * running under a lease that expired because its process died or froze — and drives each from
   * its checkpoint. Completed calls come back from the ledger, unknown ones ask the reconcile hook.
   */
  async recover(options: { limit?: number } = {}): Promise<RecoveredRun[]> {
    await this.sweep();
    const driven: RecoveredRun[] = [];
    const limit = options.limit ?? Number.POSITIVE_INFINITY;
    while (driven.length < limit) {
      const run = await this.claimNext();
      if (run === undefined) break;
      const which = { tenantId: run.tenantId, runId: run.runId };
      try {
        driven.push({ ...which, end: await this.driveClaimed(run) });
      } catch (error) {
        // One run's failure does not stop the others; this one is claimable again when its lease expires.
        driven.push({ ...which, end: { kind: 'error', error: errorInfo(error) } });
      }
    }
    return driven;
  }

  /**
   * One sweep: asks the reconcile hooks of unknown calls of runs no driver is about to replay —
   * paused, failed, completed or cancelled (a bounded number per pass, longest unknown first, each
   * call with its own growing wait; see `reconcileUnknownCalls`) — then requeues the waiting runs
   * that nothing holds any more. Returns how many runs were requeued.
   */
  async sweep(): Promise<number> {
    const reconciled = await reconcileUnknownCalls({
      ledger: this.ledger,
      tools: this.tools,
      state: this.#reconcileSweep,
      everyMs: this.#reconcileEveryMs,
      ...(this.#reconcileMaxWaitMs === undefined ? {} : { maxWaitMs: this.#reconcileMaxWaitMs }),
      ...(this.#reconcilePerSweep === undefined ? {} : { perPass: this.#reconcilePerSweep }),
    });
    const requeued = await sweepWaiting({ ledger: this.ledger, cursors: this.#sweepCursors });
    return reconciled.requeued + requeued;
  }

  approve(decision: ApprovalDecision): Promise<ApprovalRecord> {
    return decideApproval(this.ledger, 'approved', decision);
  }

  /** Rejects a call waiting for approval; the reason is required, and the model hears it. */
  reject(decision: ApprovalDecision & { reason: string }): Promise<ApprovalRecord> {
    return decideApproval(this.ledger, 'rejected', decision);
  }

  /** An operator settles an unknown call (`resolveToolCall`); a run waiting for it resumes. */
  resolve(request: ResolveRequest): Promise<ToolExecutionRecord> {
    return resolveCall(this.ledger, request);
  }

  /** An operator settles calls checked together with one reason; each its own compare-and-set. */
  resolveTogether(request: ResolveTogetherRequest): Promise<ResolvedTogether> {
    return resolveTogether(this.ledger, request);
  }

  /** An operator asks an unknown call's reconcile hook now; its answer is recorded as the sweep would. */
  askHook(request: { tenantId: string; idempotencyKey: string; actorId: string }): Promise<HookAsked> {
    return askHookNow(this.ledger, this.tools, request);
  }

  /** An operator undoes a completed call with its tool's compensation hook, once. */
  compensate(request: CompensateRequest): Promise<CompensationOutcome> {
    return compensateCall(this.ledger, this.tools, request);
  }

  /** Cancels a run that is not final; whoever drives it stands down. Nothing is compensated. */
  cancel(tenantId: string, runId: string, request: { reason: string; actorId: string }): Promise<RunRecord> {
    return cancelRun(this.store, tenantId, runId, request);
  }

  /**
   * Waits for the drives in flight and the late outcomes still expected, then closes. With
   * `timeoutMs`, late outcomes not in by then are given up: their calls stay unknown, as recorded.
   */
  async close(options: { timeoutMs?: number } = {}): Promise<void> {
    this.#closed = true;
    await Promise.allSettled([...this.#drives]);
    await this.ledger.drain(options);
    if (this.#ownsStore) await this.store.close();
  }

  agentNamed(name: string): Agent {
    return agentNamed(this.agents, name);
  }
}

/**
 * Opens a runtime on a store (or a database URL) for these agents.
 *
 * @example
 * const runtime = await openRuntime({ databaseUrl: process.env.ONCELY_DATABASE_URL, agents: [billing] });
 */
export async function openRuntime(options: RuntimeOptions): Promise<Runtime> {
  if (options.store !== undefined) return new Runtime(options.store, options);
  const store = await openStore(options.databaseUrl, { clock: options.clock ?? realClock });
  return new Runtime(store, { ...options, ownsStore: true });
}
