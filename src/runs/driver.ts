import type { Agent } from '../agents/index.js';
import type { Ledger } from '../calls/index.js';
import { crashPoint, unsafeSwitch } from '../crash/index.js';
import { errorInfo, isOncelyError } from '../errors/index.js';
import type { ErrorInfo } from '../ledger/index.js';
import { ModelPrompt } from '../models/index.js';
import {
  addUsage,
  type Checkpoint,
  type CheckpointStatus,
  type RunRecord,
  type RunUsage,
} from '../run-state/index.js';
import type { RunEventInput, SaveCheckpointRequest, StoreTx } from '../store/index.js';
import type { Tool } from '../tools/index.js';
import {
  ROOT_CONTEXT,
  SpanStatusCode,
  contextOf,
  inSpan,
  runTraceContext,
  type Context,
} from '../tracing/index.js';
import { DEFAULT_RETRY_BASE_MS, HANDED_OFF, driveEndAttributes, type DriveEnd } from './drive-end.js';
import { Lease } from './lease.js';
import { isBuiltHere } from './messages.js';
import {
  modelStep,
  type ModelResponseInfo,
  type ModelStepDriver,
  type UnsavedResponse,
} from './model-step.js';
import { settleStep, type RepeatInfo } from './settle-step.js';
import type { SaveExtras } from './step-driver.js';
import type { DeltaBus } from './stream-deltas.js';

/** A test-only switch (`ONCELY_UNSAFE_TEST_SWITCHES`): a driver fenced out drives on. */
const IGNORE_LOST_LEASE = unsafeSwitch('ignore-lost-lease');

export interface DriverOptions {
  readonly ledger: Ledger;
  readonly agent: Agent;
  /** This process's name in the lease (`host:pid` by default). */
  readonly owner: string;
  readonly leaseMs: number;
  /** The first delay before a released run is claimed again; it doubles each time, up to 60 s. */
  readonly retryBaseMs?: number;
  /** Told of each model response (its model and usage), for metrics; what it throws is ignored. */
  readonly onModelResponse?: (response: ModelResponseInfo) => void;
  /** Told of each repeat a step writes down (its tool and decision), for metrics; what it throws is ignored. */
  readonly onRepeat?: (info: RepeatInfo) => void;
  /**
   * True once the process is stopping: the drive lets go of the run at its next step boundary
   * (nothing in flight, everything durable), queued for another process to claim at once.
   */
  readonly handingOff?: () => boolean;
  /** Where a streaming agent's deltas go in this process (the runtime's bus). */
  readonly deltas?: DeltaBus;
}

/**
 * Drives one run this process has claimed, step by step, from its checkpoint: call the model, make
 * its response durable with minted call ids before anything is reserved, settle the calls, tell the
 * model, repeat, until a final answer, a wait (approval, an unknown call) or the end of its steps.
 * Every write is fenced by the lease epoch and the checkpoint version; a fenced-out write, a lost
 * lease or a cancel makes the driver stand down without side effects of its own.
 */
export class RunDriver implements ModelStepDriver {
  readonly ledger: Ledger;
  readonly agent: Agent;
  readonly owner: string;
  readonly leaseMs: number;
  readonly retryBaseMs: number;
  readonly onModelResponse: DriverOptions['onModelResponse'];
  readonly onRepeat: DriverOptions['onRepeat'];
  readonly #handingOff: () => boolean;
  /** Where a streaming agent's deltas go in this process. */
  readonly deltas: DeltaBus | undefined;
  /** Model calls this drive streamed (each retry a new one): names each stream's deltas. */
  #streams = 0;
  readonly tools: ReadonlyMap<string, Tool>;
  readonly run: RunRecord;
  readonly lease: Lease;
  #checkpoint: Checkpoint;
  #version: number;
  /** How many of the conversation's messages the run holds (each save appends those past them). */
  #storedMessages: number;
  /** This process wrote the pending calls just now (see `PlanContext.fresh`). */
  #fresh = false;
  /**
   * The model's response, in `#checkpoint` but not yet saved: it is saved in the transaction that
   * reserves its calls (`saveResponse`), or with whatever checkpoint comes next, so a step costs two
   * commits. Nothing of it is reserved before it is durable.
   */
  #unsaved: UnsavedResponse | undefined;
  /** The run's usage as saved (each save of a response adds its own). */
  #usage: RunUsage;
  /** The prompt tokens of the last model call saved: the next call's prompt is at least as long. */
  #lastInputTokens: number;
  /** Model outages in a row as this drive knows them: the claim's count, 0 once the model answers. */
  #modelOutages: number;
  /** The conversation as converted for the model: each step converts only what it added. */
  readonly prompt = new ModelPrompt({ wellFormed: isBuiltHere });
  #traceContext: Context = ROOT_CONTEXT;

  constructor(options: DriverOptions, run: RunRecord) {
    this.ledger = options.ledger;
    this.agent = options.agent;
    this.owner = options.owner;
    this.leaseMs = options.leaseMs;
    this.retryBaseMs = options.retryBaseMs ?? DEFAULT_RETRY_BASE_MS;
    this.onModelResponse = options.onModelResponse;
    this.onRepeat = options.onRepeat;
    this.#handingOff = options.handingOff ?? (() => false);
    this.deltas = options.deltas;
    this.tools = new Map(options.agent.tools.map((t) => [t.name, t]));
    this.run = run;
    this.#checkpoint = run.checkpoint;
    this.#version = run.checkpointVersion;
    this.#storedMessages = run.checkpoint.messages.length;
    this.#modelOutages = run.modelOutages;
    this.#usage = run.usage;
    this.#lastInputTokens = run.lastInputTokens;
    this.lease = new Lease({
      runs: options.ledger.store.runs,
      tenantId: run.tenantId,
      runId: run.runId,
      epoch: run.leaseEpoch,
      owner: options.owner,
      leaseMs: options.leaseMs,
      clock: options.ledger.clock,
    });
  }

  get checkpoint(): Checkpoint {
    return this.#checkpoint;
  }

  get fresh(): boolean {
    return this.#fresh;
  }

  /**
   * The context of this drive's span: the model and tool spans hang from it. Every drive of the run,
   * in any process, is in the run's one trace (see src/tracing).
   */
  get traceContext(): Context {
    return this.#traceContext;
  }

  /** The run's usage as saved. */
  get usage(): RunUsage {
    return this.#usage;
  }

  get lastInputTokens(): number {
    return this.#lastInputTokens;
  }

  get modelOutages(): number {
    return this.#modelOutages;
  }

  /** Counts a model call this drive streams, and answers its number. */
  nextStream(): number {
    return ++this.#streams;
  }

  /**
   * Takes in the model's response of a step with calls to make: held in the checkpoint, unsaved
   * (see `#unsaved`), its calls minted by this drive just now.
   */
  holdResponse(checkpoint: Checkpoint, unsaved: UnsavedResponse): void {
    this.#checkpoint = checkpoint;
    this.#unsaved = unsaved;
    this.#fresh = true;
  }

  /** Drives until the run waits, ends or is lost. Stops the lease on the way out. */
  async drive(): Promise<DriveEnd> {
    const parent = runTraceContext(this.run.tenantId, this.run.runId);
    return inSpan(
      'oncely.run.drive',
      {
        parent,
        attributes: () => ({
          'oncely.run.id': this.run.runId,
          'oncely.tenant.id': this.run.tenantId,
          'oncely.agent': this.agent.name,
          'oncely.lease.epoch': this.lease.epoch,
          'oncely.worker': this.owner,
          'oncely.run.step': this.#checkpoint.step,
        }),
      },
      async (span) => {
        this.#traceContext = contextOf(span, parent);
        try {
          const end = await this.#driveRounds();
          if (span.isRecording()) span.setAttributes(driveEndAttributes(end));
          if (end.kind === 'ended' && end.status === 'failed') {
            span.setStatus({
              code: SpanStatusCode.ERROR,
              message: end.reason ?? end.error?.message ?? 'failed',
            });
          }
          return end;
        } finally {
          await this.lease.stop();
        }
      },
    );
  }

  async #driveRounds(): Promise<DriveEnd> {
    for (let round = 1; ; round++) {
      const end = await this.#driveOn();
      if (!(IGNORE_LOST_LEASE && end.kind === 'stood_down' && round < 8 && (await this.#carryOn()))) {
        return end;
      }
    }
  }

  async #driveOn(): Promise<DriveEnd> {
    try {
      for (;;) {
        if (this.lease.lost) return this.standDown();
        // Between steps, with the model's response durable (or none asked yet): nothing is lost.
        if (this.#unsaved === undefined && this.#handingOff()) {
          return await this.release(undefined, 'shutdown', 0, HANDED_OFF);
        }
        const end = this.#checkpoint.pending === null ? await modelStep(this) : await settleStep(this);
        if (end !== undefined) return end;
      }
    } catch (error) {
      if (this.lease.lost || isOncelyError(error, 'RUN_LEASE_LOST')) {
        this.lease.lose(errorInfo(error).message);
        return this.standDown();
      }
      throw error;
    }
  }

  /**
   * Under the `ignore-lost-lease` test switch only: a driver fenced out reads the run again and
   * drives on from what it finds, while another process holds the run. True when the run is still
   * being driven by someone.
   */
  async #carryOn(): Promise<boolean> {
    const run = await this.ledger.store.runs.get(this.run.tenantId, this.run.runId);
    if (run?.status !== 'running') return false;
    process.emitWarning(
      `oncely: UNSAFE ignore-lost-lease: driving run ${run.runId} on without its lease (epoch ${this.lease.epoch}; it stands at ${run.leaseEpoch})`,
    );
    this.#checkpoint = run.checkpoint;
    this.#version = run.checkpointVersion;
    this.#storedMessages = run.checkpoint.messages.length;
    this.#unsaved = undefined;
    this.#fresh = false;
    return true;
  }

  /**
   * Lets go of the run from outside its drive (a stopping process past its grace): the lease is
   * lost here first, so this drive writes no checkpoint and reserves nothing more (the outcomes of
   * calls in flight are still recorded), then the run is released for another process to claim at
   * once. A call whose attempt may still land stays as recorded; the next driver waits for its
   * deadline or asks its reconcile hook. False when the run was no longer this driver's.
   */
  async letGo(reason: string): Promise<boolean> {
    if (this.lease.lost) return false;
    this.lease.lose(reason);
    return this.ledger.store.runs.release({
      fence: { tenantId: this.run.tenantId, runId: this.run.runId, leaseEpoch: this.lease.epoch },
      cause: 'shutdown',
      delayMs: 0,
      reason,
      lastError: null,
    });
  }

  standDown(): DriveEnd {
    const reason = this.lease.signal.reason as unknown;
    return { kind: 'stood_down', reason: errorInfo(reason).message };
  }

  /**
   * Saves the next checkpoint, fenced by this driver's epoch and the version it holds. Inside `tx`
   * it commits with whatever else the transaction writes. False: fenced out, the lease is lost.
   */
  async save(
    tx: StoreTx | undefined,
    checkpoint: Checkpoint,
    status: CheckpointStatus,
    extras: SaveExtras = {},
  ): Promise<boolean> {
    await crashPoint('checkpoint.before-commit');
    const request = this.saveRequest(checkpoint, status, extras);
    if (request === undefined) return false;
    const runs = tx?.runs ?? this.ledger.store.runs;
    return this.saved(request, await runs.saveCheckpoint(request));
  }

  /**
   * The save of the next checkpoint, fenced by this driver's epoch and the version it holds, with the
   * model's response if it is not saved yet (the checkpoint holds its messages). Undefined when this
   * driver knows its lease is gone (it froze past it): it writes no checkpoint, even where the fence
   * would still let it (nobody has claimed the run yet).
   */
  saveRequest(
    checkpoint: Checkpoint,
    status: CheckpointStatus,
    extras: SaveExtras = {},
  ): SaveCheckpointRequest | undefined {
    if (this.lease.lost) return undefined;
    const unsaved = this.#unsaved;
    const merged: SaveExtras =
      unsaved === undefined
        ? extras
        : {
            ...extras,
            events: [...unsaved.events, ...(extras.events ?? [])],
            modelAnswered: true,
            usage: unsaved.usage,
          };
    return {
      fence: {
        tenantId: this.run.tenantId,
        runId: this.run.runId,
        leaseEpoch: this.lease.epoch,
        checkpointVersion: this.#version,
      },
      checkpoint,
      storedMessages: this.#storedMessages,
      status,
      ...merged,
    };
  }

  /**
   * Takes in what became of a save (`saveRequest`), written here or in a step's write: the version it
   * made, or undefined when it was fenced out (then the lease is lost). False: fenced out.
   */
  saved(request: SaveCheckpointRequest, version: number | undefined): boolean {
    if (version === undefined) {
      this.lease.lose(
        'a newer checkpoint or lease epoch stands (another process drives the run, or it was cancelled)',
      );
      return false;
    }
    this.#checkpoint = request.checkpoint;
    this.#version = version;
    this.#storedMessages = request.checkpoint.messages.length;
    this.#fresh = false;
    this.#unsaved = undefined;
    if (request.modelAnswered === true) this.#modelOutages = 0;
    if (request.usage !== undefined) {
      this.#usage = addUsage(this.#usage, request.usage);
      this.#lastInputTokens = request.usage.inputTokens;
    }
    return true;
  }

  /**
   * The end of the drive in `status` (a wait or a final status) as a save: its extras with the status
   * event, and what the drive returns once it is saved.
   */
  ending(
    status: Exclude<CheckpointStatus, 'running'>,
    extras: SaveExtras,
  ): { extras: SaveExtras; end: DriveEnd } {
    const events = [...(extras.events ?? []), statusEvent(status, extras)];
    const why = {
      ...(extras.error == null ? {} : { error: extras.error }),
      ...(extras.reason == null ? {} : { reason: extras.reason }),
    };
    return { extras: { ...extras, events }, end: { kind: 'ended', status, ...why } };
  }

  /**
   * The model's response if it is not saved yet, as the save that goes first in the write reserving
   * its calls (so no call is reserved whose response a crash could lose), renewing the lease in the
   * same write. Undefined: nothing is left to save, or the lease is known lost.
   */
  responseSave(): SaveCheckpointRequest | undefined {
    if (this.#unsaved === undefined) return undefined;
    const request = this.saveRequest(this.#checkpoint, 'running');
    return request && { ...request, renewLease: { owner: this.owner, leaseMs: this.leaseMs } };
  }

  /** Takes in what became of the response's save (`responseSave`). False: fenced out. */
  responseSaved(request: SaveCheckpointRequest, version: number | undefined): boolean {
    const fresh = this.#fresh;
    const saved = this.saved(request, version);
    // The calls were still minted by this drive: it knows no record of them can stand.
    this.#fresh = saved && fresh;
    return saved;
  }

  /** Ends the drive in `status` (a wait or a final status), or stands down if fenced out. */
  async end(
    tx: StoreTx | undefined,
    checkpoint: Checkpoint,
    status: Exclude<CheckpointStatus, 'running'>,
    extras: SaveExtras,
  ): Promise<DriveEnd> {
    const ending = this.ending(status, extras);
    return (await this.save(tx, checkpoint, status, ending.extras)) ? ending.end : this.standDown();
  }

  /**
   * Lets go of the run, to be claimed again after `delayMs` (inside `tx` when given, with whatever
   * else it writes). Stands down when fenced out.
   */
  async release(
    tx: StoreTx | undefined,
    cause: 'model_outage' | 'waiting' | 'shutdown',
    delayMs: number,
    reason: string,
    lastError: ErrorInfo | null = null,
  ): Promise<DriveEnd> {
    const runs = tx?.runs ?? this.ledger.store.runs;
    const released = await runs.release({
      fence: { tenantId: this.run.tenantId, runId: this.run.runId, leaseEpoch: this.lease.epoch },
      cause,
      delayMs,
      reason,
      lastError,
    });
    if (!released) {
      this.lease.lose('a newer lease epoch stands (another process drives the run, or it was cancelled)');
      return this.standDown();
    }
    return { kind: 'released', reason, delayMs };
  }
}

function statusEvent(status: CheckpointStatus, extras: SaveExtras): RunEventInput {
  return { type: 'run.status', data: { status, reason: extras.reason ?? null } };
}
