import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Agent } from '../agents/index.js';
import {
  Ledger,
  REASON_MAX,
  assertActorId,
  compensateToolCall,
  operatorReason,
  resolveToolCall,
  type CompensateRequest,
  type CompensationOutcome,
  type LedgerLog,
  type ResolveRequest,
} from '../calls/index.js';
import { OncelyError, errorInfo } from '../errors/index.js';
import {
  assertTenantId,
  argsDigest,
  canonicalJson,
  isValidId,
  type ErrorInfo,
  parseKey,
  type JsonValue,
  type ToolExecutionRecord,
} from '../ledger/index.js';
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
import { decideApproval, type ApprovalDecision } from './decisions.js';
import { DEFAULT_RETRY_BASE_MS, inSeconds, retryDelay, type DriveEnd } from './drive-end.js';
import { RunDriver } from './driver.js';
import type { ModelResponseInfo } from './model-step.js';
import { initialMessages } from './messages.js';
import { DeltaBus } from './stream-deltas.js';
import { jsonInput, uiMessages, userMessage, type UiMessage, type UserContent } from './conversation.js';
import { resumeIfReady, sweepWaiting } from './resume.js';
import { DEFAULT_RECONCILE_EVERY_MS, ReconcileSweepState, reconcileUnknownCalls } from './reconcile-sweep.js';

export const DEFAULT_LEASE_MS = 30_000;

export interface RuntimeOptions {
  /** The agents this runtime can drive; a worker claims only runs of these. */
  readonly agents: readonly Agent[];
  /**
   * Tools known here besides the agents' own (every tool of a tools module): their compensation and
   * reconcile hooks serve operators even where no agent using them is driven (an API-only server).
   */
  readonly tools?: readonly Tool[];
  /** An open store; it stays open after `close()` unless `ownsStore`. */
  readonly store?: Store;
  /** Or a database URL to open (`sqlite:PATH` is migrated; PostgreSQL must be current). */
  readonly databaseUrl?: string;
  /** This process in leases and the ledger's history; default `host:pid`. */
  readonly owner?: string;
  /** How long a claim holds a run without renewal; default 30 s. */
  readonly leaseMs?: number;
  /**
   * The first wait before `sweep()` asks a reconcile hook that could not tell about a call again
   * (it doubles at each such answer, up to `reconcileMaxWaitMs`); also how long a call of a run that
   * just paused is left alone (its drive has just asked). 0 asks on every sweep. Default 30 s.
   */
  readonly reconcileEveryMs?: number;
  /** The longest wait between two asks of one call's hook by `sweep()`; default 10 minutes. */
  readonly reconcileMaxWaitMs?: number;
  /** Reconcile hooks `sweep()` asks at most per pass, longest unknown calls first; default 20. */
  readonly reconcilePerSweep?: number;
  /**
   * Drives of one run that may fail (throw, or die with their process) in a row before the run ends
   * `failed` with `RUN_RETRIES_EXCEEDED`; default 5. Counted at claim time.
   */
  readonly maxDriveAttempts?: number;
  /** The first delay before a released run is claimed again; it doubles each time; default 1000 ms. */
  readonly retryBaseMs?: number;
  /** Attempts of one key before a reconcile hook's `failed` no longer re-opens it; default 3. */
  readonly maxAttemptsPerCall?: number;
  /** Added to an attempt's timeout before it is taken to be unable to land; default 5000 ms. */
  readonly landingMarginMs?: number;
  /** How long a crashed process's slot of a tool with `concurrency` stays taken; default 30000 ms. */
  readonly toolSlotLeaseMs?: number;
  /** Where ledger conflicts are logged at error level; default standard error. */
  readonly log?: LedgerLog;
  /** Told of each model response of a run this runtime drives (its model and usage), for metrics. */
  readonly onModelResponse?: (response: ModelResponseInfo) => void;
  /**
   * The time of everything this runtime does: leases and their renewals, attempts' timeouts and
   * backoffs, tool slots, model call timeouts, the sweep's waits, a worker's polls and heartbeats.
   * Default the machine's (`realClock`); a simulation passes a virtual one. A store opened here from
   * `databaseUrl` gets it too; an open `store` keeps the clock it was opened with, so open it with the
   * same one (`openStore(url, { clock })`).
   */
  readonly clock?: Clock;
  /** The jitter of a read tool's backoff, a number in [0, 1); default `Math.random`. */
  readonly random?: () => number;
}

export const DEFAULT_MAX_DRIVE_ATTEMPTS = 5;

export interface StartRunRequest {
  readonly tenantId: string;
  readonly agent: string;
  /** The user's message: a string, or any JSON (sent to the model as JSON text). */
  readonly input: unknown;
  /** A client-chosen id makes starting idempotent; default a fresh `run_…`. */
  readonly runId?: string;
  /**
   * Tokens the run may spend in all its turns (a positive integer), or null for no limit; default
   * the agent's `tokenBudget`.
   */
  readonly tokenBudget?: number | null;
}

/** The next user message of a run that has answered. */
export interface SendMessage {
  readonly tenantId: string;
  readonly runId: string;
  /** Text, or parts: `text`, `json` (structured content), `image`, `file` (a URL or base64 data). */
  readonly content: UserContent;
  /**
   * The sender's id for this message (1-128 of `A-Z a-z 0-9 _ . -`): sending it again, after a lost
   * answer, is the same turn, never a second one. Default a fresh `msg_…` (then a resend is a new turn).
   */
  readonly clientMessageId?: string;
  /** Who sent it (an API key's actor), kept on the turn. */
  readonly actorId?: string;
}

/** What `send` did: the turn the message is (`sent` false: it had been sent before) and the run now. */
export interface SentMessage {
  readonly sent: boolean;
  readonly turn: RunTurn;
  readonly run: RunSummary;
}

/** A run `recover()` drove: how its drive ended, or the error it threw (its lease then expires). */
export interface RecoveredRun {
  readonly tenantId: string;
  readonly runId: string;
  readonly end: DriveEnd | { readonly kind: 'error'; readonly error: ErrorInfo };
}

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
    return this.#create(request, undefined);
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
    const { created, run } = await this.#create(request, { owner: this.owner, leaseMs: this.leaseMs });
    if (!created) return this.drive(run.tenantId, run.runId);
    await this.driveClaimed(run);
    return this.getRun(run.tenantId, run.runId);
  }

  /**
   * What creating a run writes, checked (tenant, agent, run id, input, budget) but not written: for
   * a caller that creates the run inside its own transaction (a workflow starting a node's run).
   */
  newRun(request: StartRunRequest & { runId: string }): CreateRunRequest {
    assertTenantId(request.tenantId);
    const agent = this.agentNamed(request.agent);
    if (!isValidId(request.runId)) {
      throw new OncelyError(
        'RUN_INPUT_INVALID',
        `run id ${JSON.stringify(request.runId)} is not valid; use 1-128 of A-Z a-z 0-9 _ . -`,
      );
    }
    const input = runInput(request.input);
    return {
      tenantId: request.tenantId,
      runId: request.runId,
      agent: request.agent,
      input,
      checkpoint: { messages: initialMessages(input), step: 0, pending: null },
      tokenBudget: runTokenBudget(request.tokenBudget, agent),
    };
  }

  async #create(
    request: StartRunRequest,
    claim: CreateRunRequest['claim'],
  ): Promise<{ created: boolean; run: RunRecord }> {
    assertTenantId(request.tenantId);
    this.agentNamed(request.agent);
    const runId = request.runId ?? `run_${randomBytes(8).toString('hex')}`;
    if (!isValidId(runId)) {
      throw new OncelyError(
        'RUN_INPUT_INVALID',
        `run id ${JSON.stringify(runId)} is not valid; use 1-128 of A-Z a-z 0-9 _ . -`,
      );
    }
    const input = runInput(request.input);
    const tokenBudget = runTokenBudget(request.tokenBudget, this.agentNamed(request.agent));
    const created = await this.store.runs.create({
      tenantId: request.tenantId,
      runId,
      agent: request.agent,
      input,
      checkpoint: { messages: initialMessages(input), step: 0, pending: null },
      tokenBudget,
      ...(claim === undefined ? {} : { claim }),
    });
    const { run } = created;
    if (
      !created.created &&
      (run.agent !== request.agent || canonicalJson(run.input) !== canonicalJson(input))
    ) {
      throw new OncelyError(
        'RUN_CONFLICT',
        `run ${runId} already exists with another agent or input; a run id names one run, so nothing was started`,
        { details: { runId, agent: run.agent } },
      );
    }
    return created;
  }

  /** The run with its whole conversation (`checkpoint.messages`). */
  async getRun(tenantId: string, runId: string): Promise<RunRecord> {
    assertTenantId(tenantId);
    const run = isValidId(runId) ? await this.store.runs.get(tenantId, runId) : undefined;
    return run ?? runNotFound(runId);
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
  async send(request: SendMessage): Promise<SentMessage> {
    assertTenantId(request.tenantId);
    if (!isValidId(request.runId)) runNotFound(request.runId);
    const clientMessageId = request.clientMessageId ?? `msg_${randomBytes(8).toString('hex')}`;
    if (!isValidId(clientMessageId)) {
      throw new OncelyError(
        'RUN_INPUT_INVALID',
        `client message id ${JSON.stringify(clientMessageId)} is not valid; use 1-128 of A-Z a-z 0-9 _ . -`,
      );
    }
    if (request.actorId !== undefined) assertActorId(request.actorId, 'a message');
    const message = await userMessage(request.content);
    const result = await this.store.runs.sendMessage({
      tenantId: request.tenantId,
      runId: request.runId,
      clientMessageId,
      message,
      messageDigest: argsDigest(message),
      actorId: request.actorId ?? null,
      reason: 'a new message: the next turn',
    });
    if (result === undefined) runNotFound(request.runId);
    switch (result.kind) {
      case 'sent':
      case 'replayed':
        return { sent: result.kind === 'sent', turn: result.turn, run: result.run };
      case 'mismatch':
        throw new OncelyError(
          'RUN_MESSAGE_CONFLICT',
          `run ${request.runId} already took message ${clientMessageId} (turn ${result.turn.turn}) with other ` +
            'content; a new message needs a new client message id, and nothing was appended',
          { details: { runId: request.runId, clientMessageId, turn: result.turn.turn } },
        );
      case 'not_ready':
        throw new OncelyError(
          'RUN_NOT_AWAITING_MESSAGE',
          `run ${request.runId} is ${result.run.status}; it takes a new message once it has answered ` +
            `(completed)${result.run.status === 'failed' ? ' — retry it first' : ''}, and nothing was appended`,
          { details: { runId: request.runId, status: result.run.status } },
        );
    }
  }

  /** A run's later turns: each message sent to it, with its client id and place in the conversation. */
  async turns(tenantId: string, runId: string): Promise<RunTurn[]> {
    await this.getRunSummary(tenantId, runId);
    return this.store.runs.turns(tenantId, runId);
  }

  /** A run's conversation as AI SDK UI messages (what `useChat` renders). */
  async uiMessages(tenantId: string, runId: string): Promise<UiMessage[]> {
    const run = await this.getRun(tenantId, runId);
    return uiMessages(run.runId, run.checkpoint.messages);
  }

  /** What a tenant's runs created in the window cost, in all and by agent. */
  async usage(tenantId: string, filter: UsageFilter = {}): Promise<TenantUsage> {
    assertTenantId(tenantId);
    return this.store.runs.usage(tenantId, filter);
  }

  /** The run without its conversation: status, step, pending calls, lease; one row however long the run. */
  async getRunSummary(tenantId: string, runId: string): Promise<RunSummary> {
    assertTenantId(tenantId);
    const run = isValidId(runId) ? await this.store.runs.summary(tenantId, runId) : undefined;
    return run ?? runNotFound(runId);
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
    if (run.driveAttempts > this.maxDriveAttempts) return this.#failExhausted(run);
    const driver = new RunDriver(
      {
        ledger: this.ledger,
        agent: this.agentNamed(run.agent),
        owner: this.owner,
        leaseMs: this.leaseMs,
        retryBaseMs: this.retryBaseMs,
        ...(this.onModelResponse === undefined ? {} : { onModelResponse: this.onModelResponse }),
        handingOff: () => this.#handingOff,
        deltas: this.deltas,
      },
      run,
    );
    this.#drivers.add(driver);
    try {
      return await driver.drive();
    } catch (error) {
      await this.#releaseFailedDrive(run, error);
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

  /** Ends a run claimed more times than its drives may fail, with the last error it recorded. */
  async #failExhausted(run: RunRecord): Promise<DriveEnd> {
    const failed = run.driveAttempts - 1;
    const last = run.lastError === null ? 'none was recorded (the process died)' : run.lastError.message;
    const error = new OncelyError(
      'RUN_RETRIES_EXCEEDED',
      `run ${run.runId} was driven ${failed} times without getting anywhere (the most this runtime tries is ` +
        `${this.maxDriveAttempts}); the last error: ${last}. Fix the cause, then \`oncely runs retry ${run.runId} --reason "..."\``,
      { details: { runId: run.runId, driveAttempts: failed, lastError: run.lastError } },
    );
    const version = await this.store.runs.saveCheckpoint({
      fence: {
        tenantId: run.tenantId,
        runId: run.runId,
        leaseEpoch: run.leaseEpoch,
        checkpointVersion: run.checkpointVersion,
      },
      checkpoint: run.checkpoint,
      storedMessages: run.checkpoint.messages.length,
      status: 'failed',
      error: error.toJSON(),
      reason: error.message,
      events: [{ type: 'run.status', data: { status: 'failed', reason: error.message } }],
    });
    if (version === undefined) return { kind: 'stood_down', reason: 'another process holds the run' };
    return { kind: 'ended', status: 'failed', error: error.toJSON(), reason: error.message };
  }

  /** A drive threw: record its error and let the run go, to be claimed again after a backoff. */
  async #releaseFailedDrive(run: RunRecord, thrown: unknown): Promise<void> {
    const info = errorInfo(thrown);
    const delayMs = retryDelay(this.retryBaseMs, run.driveAttempts);
    try {
      await this.store.runs.release({
        fence: { tenantId: run.tenantId, runId: run.runId, leaseEpoch: run.leaseEpoch },
        cause: 'failed_drive',
        delayMs,
        reason:
          `drive ${run.driveAttempts} of at most ${this.maxDriveAttempts} failed: ${info.message}; ` +
          `trying again in ${inSeconds(delayMs)}`,
        lastError: info,
      });
    } catch {
      // The store is unreachable: the lease expires and the run is claimed again all the same.
    }
  }

  /**
   * An operator re-drives a `failed` run from its last checkpoint (reason required): it is queued
   * again with its counters cleared. Keys stay stable, so completed calls replay and unknown calls
   * are asked of their hooks; nothing that took effect runs again.
   */
  async retry(
    tenantId: string,
    runId: string,
    request: { reason: string; actorId: string },
  ): Promise<RunRecord> {
    const run = await this.getRun(tenantId, runId);
    assertActorId(request.actorId, 'a retry');
    const reason = operatorReason(request.reason, `a retry needs a reason (1-${REASON_MAX} characters)`);
    const retried = await this.store.runs.retry(tenantId, runId, reason, request.actorId);
    if (retried !== undefined) return retried;
    const now = await this.getRun(tenantId, runId);
    throw new OncelyError(
      'RUN_NOT_RETRYABLE',
      `run ${runId} is ${now.status}, not failed; only a failed run can be retried, and nothing was changed`,
      { details: { runId, status: now.status, was: run.status } },
    );
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
  async resolve(request: ResolveRequest): Promise<ToolExecutionRecord> {
    const record = await resolveToolCall(this.ledger, request);
    await resumeIfReady(this.ledger, record.tenantId, record.runId);
    return record;
  }

  /** An operator undoes a completed call with its tool's compensation hook, once. */
  async compensate(request: CompensateRequest): Promise<CompensationOutcome> {
    assertTenantId(request.tenantId);
    parseKey(request.idempotencyKey);
    const record = await this.store.ledger.get(request.tenantId, request.idempotencyKey);
    if (record === undefined) {
      throw new OncelyError(
        'LEDGER_RECORD_NOT_FOUND',
        `no tool call ${request.idempotencyKey} in this tenant's ledger`,
        { details: { key: request.idempotencyKey } },
      );
    }
    const tool = this.tools.get(record.toolName);
    if (tool === undefined) {
      throw new OncelyError(
        'LEDGER_NOT_COMPENSABLE',
        `tool call ${record.idempotencyKey} was made by tool "${record.toolName}", which this runtime does not ` +
          `know (no agent or tools module given to it has it), so its compensate hook cannot run here; ` +
          `compensate from a server that loads the tools module exporting "${record.toolName}": ` +
          `\`oncely serve -c oncely.yaml\` where that file's \`tools:\` names it (with --no-worker too)`,
        { details: { key: record.idempotencyKey, status: record.status } },
      );
    }
    const outcome = await compensateToolCall(this.ledger, tool, request);
    await resumeIfReady(this.ledger, outcome.record.tenantId, outcome.record.runId);
    return outcome;
  }

  /** Cancels a run that is not final; whoever drives it stands down. Nothing is compensated. */
  async cancel(
    tenantId: string,
    runId: string,
    request: { reason: string; actorId: string },
  ): Promise<RunRecord> {
    const run = await this.getRun(tenantId, runId);
    assertActorId(request.actorId, 'a cancel');
    const reason = operatorReason(request.reason, `a cancel needs a reason (1-${REASON_MAX} characters)`);
    const cancelled = await this.store.runs.cancel(tenantId, runId, reason, request.actorId);
    if (cancelled !== undefined) return cancelled;
    const now = await this.getRun(tenantId, runId);
    throw new OncelyError('RUN_ALREADY_FINAL', `run ${runId} is already ${now.status}; nothing was changed`, {
      details: { runId, status: now.status, was: run.status },
    });
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
    const agent = this.agents.get(name);
    if (agent !== undefined) return agent;
    throw new OncelyError(
      'AGENT_NOT_FOUND',
      `there is no agent "${name}" here; the agents are: ${[...this.agents.keys()].join(', ') || '(none)'}`,
      { details: { agent: name } },
    );
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

function indexAgents(agents: readonly Agent[]): Map<string, Agent> {
  const byName = new Map<string, Agent>();
  for (const agent of agents) {
    if (byName.has(agent.name)) {
      throw new OncelyError('AGENT_DEFINITION_INVALID', `two agents are named "${agent.name}"`);
    }
    byName.set(agent.name, agent);
  }
  return byName;
}

/** Every tool of every agent, and the tools given besides, by name; one name must mean one tool. */
function indexTools(tools: readonly Tool[]): Map<string, Tool> {
  const byName = new Map<string, Tool>();
  for (const tool of tools) {
    const known = byName.get(tool.name);
    if (known !== undefined && known !== tool) {
      throw new OncelyError(
        'AGENT_DEFINITION_INVALID',
        `two different tools are named "${tool.name}"; a tool name must mean one tool across agents and tools`,
      );
    }
    byName.set(tool.name, tool);
  }
  return byName;
}

function runInput(input: unknown): JsonValue {
  if (input === undefined)
    throw new OncelyError('RUN_INPUT_INVALID', 'a run needs an input: the user message');
  return jsonInput(input, 'run input');
}

/** A run's token budget: the request's (null: none), else the agent's. */
function runTokenBudget(budget: number | null | undefined, agent: Agent): number | null {
  if (budget === undefined) return agent.tokenBudget;
  if (budget === null) return null;
  if (!Number.isSafeInteger(budget) || budget < 1) {
    throw new OncelyError(
      'RUN_INPUT_INVALID',
      `a token budget is a positive whole number of tokens, or null for none; got ${JSON.stringify(budget)}`,
    );
  }
  return budget;
}

function runNotFound(runId: string): never {
  throw new OncelyError('RUN_NOT_FOUND', `no run ${runId} in this tenant`, { details: { runId } });
}
