import type { Agent } from '../agents/index.js';
import type { Ledger } from '../calls/index.js';
import type { ErrorInfo } from '../ledger/index.js';
import type { Checkpoint, CheckpointStatus, RunRecord } from '../run-state/index.js';
import type { SaveCheckpointRequest, StoreTx } from '../store/index.js';
import type { Tool } from '../tools/index.js';
import type { Context } from '../tracing/index.js';
import type { DriveEnd } from './drive-end.js';
import type { Lease } from './lease.js';

/** What a checkpoint save may write besides the checkpoint and status. */
export type SaveExtras = Omit<
  SaveCheckpointRequest,
  'fence' | 'checkpoint' | 'storedMessages' | 'status' | 'renewLease'
>;

/**
 * What a step of a drive (the model step, the settle step) sees of the driver that runs it: the run,
 * its lease, the checkpoint it holds and the writes fenced by both. `RunDriver` (driver.ts) is the
 * one implementation and documents each member; the steps import this interface, not the driver, so
 * the modules depend one way: driver → steps → this.
 */
export interface StepDriver {
  readonly ledger: Ledger;
  readonly agent: Agent;
  readonly owner: string;
  readonly leaseMs: number;
  readonly tools: ReadonlyMap<string, Tool>;
  readonly run: RunRecord;
  readonly lease: Lease;
  readonly checkpoint: Checkpoint;
  readonly fresh: boolean;
  readonly traceContext: Context;
  save(
    tx: StoreTx | undefined,
    checkpoint: Checkpoint,
    status: CheckpointStatus,
    extras?: SaveExtras,
  ): Promise<boolean>;
  saveRequest(
    checkpoint: Checkpoint,
    status: CheckpointStatus,
    extras?: SaveExtras,
  ): SaveCheckpointRequest | undefined;
  saved(request: SaveCheckpointRequest, version: number | undefined): boolean;
  ending(
    status: Exclude<CheckpointStatus, 'running'>,
    extras: SaveExtras,
  ): { extras: SaveExtras; end: DriveEnd };
  responseSave(): SaveCheckpointRequest | undefined;
  responseSaved(request: SaveCheckpointRequest, version: number | undefined): boolean;
  end(
    tx: StoreTx | undefined,
    checkpoint: Checkpoint,
    status: Exclude<CheckpointStatus, 'running'>,
    extras: SaveExtras,
  ): Promise<DriveEnd>;
  release(
    tx: StoreTx | undefined,
    cause: 'model_outage' | 'waiting' | 'shutdown',
    delayMs: number,
    reason: string,
    lastError?: ErrorInfo | null,
  ): Promise<DriveEnd>;
  standDown(): DriveEnd;
}
