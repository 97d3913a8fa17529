import type { Actor } from '../ledger/index.js';
import type { RunStore, SaveCheckpointRequest } from './run-store.js';
import type {
  LedgerStore,
  ReserveRequest,
  ReserveResult,
  TransitionRequest,
  TransitionResult,
} from './ledger-store.js';

/*
 * The two writes of a run-loop step, each one atomic write: one statement on PostgreSQL (a round trip
 * and a commit), one transaction elsewhere. They write nothing a transaction of the parts' own methods
 * could not; they only spare the round trips.
 */

/** A model's response made durable with the reservation of its calls. */
export interface ReserveStepRequest {
  /** The response's checkpoint, fenced as `saveCheckpoint`; nothing is reserved unless it is saved. */
  readonly save: SaveCheckpointRequest;
  /** New calls of one tenant (no re-opens), reserved as `reserve` does. */
  readonly reservations: readonly ReserveRequest[];
  readonly actor: Actor;
}

/** The checkpoint's new version and the reservations, or undefined when the save was fenced out. */
export type ReserveStepResult =
  { readonly version: number; readonly reservations: ReserveResult[] } | undefined;

/** A step's outcomes with the checkpoint that tells them. */
export interface RecordStepRequest {
  readonly transitions: readonly TransitionRequest[];
  /** Saved only when every transition applies (it tells the outcomes as the caller foresaw them). */
  readonly save: SaveCheckpointRequest;
}

export interface RecordStepResult {
  /** As `transitions` answers them; the moves that applied are written whatever became of the save. */
  readonly results: TransitionResult[];
  /**
   * The checkpoint's new version; undefined when the save was fenced out; null when it was not tried
   * because a transition did not apply (the caller tells what did happen, in a write of its own).
   */
  readonly version: number | undefined | null;
}

/**
 * The parts of a transaction a step's write goes through (a `StoreTx` is one); named here so this
 * module does not import the `Store` that names its writes.
 */
export interface StepParts {
  readonly ledger: LedgerStore;
  readonly runs: RunStore;
}

/** `reserveStep` as one transaction of the parts' own methods. */
export async function reserveStepIn(tx: StepParts, request: ReserveStepRequest): Promise<ReserveStepResult> {
  assertNew(request.reservations);
  const version = await tx.runs.saveCheckpoint(request.save);
  if (version === undefined) return undefined;
  return { version, reservations: await tx.ledger.reserve(request.reservations, request.actor) };
}

/** `recordStep` as one transaction of the parts' own methods. */
export async function recordStepIn(tx: StepParts, request: RecordStepRequest): Promise<RecordStepResult> {
  const results = await tx.ledger.transitions(request.transitions);
  if (!results.every((r) => r.applied)) return { results, version: null };
  return { results, version: await tx.runs.saveCheckpoint(request.save) };
}

export function assertNew(reservations: readonly ReserveRequest[]): void {
  if (reservations.some((r) => r.reopenVersion !== undefined)) {
    throw new Error('a step reserves new calls only; a re-open goes through reserve()');
  }
}
