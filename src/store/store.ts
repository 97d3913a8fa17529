import type {
  RecordStepRequest,
  RecordStepResult,
  ReserveStepRequest,
  ReserveStepResult,
} from './step-writes.js';
import type { ApiKeyStore } from './api-key-store.js';
import type { LedgerStore } from './ledger-store.js';
import type { LoopStepStore } from './loop-step-store.js';
import type { WorkerStore } from './worker-store.js';
import type { ToolSlotStore } from './tool-slot-store.js';
import type { Wakeups } from './wakeups.js';
import type { MonitorStore } from './monitor-store.js';
import type { RunStore } from './run-store.js';
import type { WorkflowStore } from './workflow-store.js';

export type SchemaState =
  | { readonly state: 'current'; readonly version: number }
  | { readonly state: 'outdated'; readonly version: number; readonly latest: number }
  | { readonly state: 'too-new'; readonly version: number; readonly latest: number };

export interface MigrationReport {
  readonly applied: readonly string[];
  readonly version: number;
}

export type StoreDialect = 'sqlite' | 'postgres';

/** What a transaction's function writes through. */
export interface StoreTx {
  readonly ledger: LedgerStore;
  readonly runs: RunStore;
  /** Workflow runs and their events. */
  readonly workflows: WorkflowStore;
}

/** A store: the ledger, the runs and the API keys on one database. */
export interface Store extends StoreTx {
  readonly dialect: StoreDialect;
  readonly apiKeys: ApiKeyStore;
  /** The recorded model responses of loops an application drives itself (`oncely/ai-sdk`). */
  readonly loopSteps: LoopStepStore;
  /** The processes that drive runs, as their heartbeats say (for operators; leases decide). */
  readonly workers: WorkerStore;
  /** Cluster-wide limits on a tool's concurrent calls (`concurrency` on a tool). */
  readonly toolSlots: ToolSlotStore;
  /**
   * Wake-ups between processes where the database carries them (PostgreSQL LISTEN/NOTIFY); undefined
   * on SQLite, where workers poll.
   */
  readonly wakeups?: Wakeups;
  /** Read-only views for operators and metrics (unknown calls, counts). */
  readonly monitor: MonitorStore;
  /** Runs `fn` in one database transaction; everything it writes commits or none of it does. */
  transaction<T>(fn: (tx: StoreTx) => Promise<T>): Promise<T>;
  /** A model's response saved with the reservation of its calls, in one atomic write. */
  reserveStep(request: ReserveStepRequest): Promise<ReserveStepResult>;
  /** A step's outcomes recorded with the checkpoint that tells them, in one atomic write. */
  recordStep(request: RecordStepRequest): Promise<RecordStepResult>;
  migrate(): Promise<MigrationReport>;
  schemaState(): Promise<SchemaState>;
  /**
   * Readiness: resolves when the store could take a write now (PostgreSQL: the tables answer;
   * SQLite: the file is the one opened and its write lock can be had), else rejects with a coded
   * error. The caller bounds how long it waits (`/readyz` gives it 2 s).
   */
  probe(): Promise<void>;
  close(): Promise<void>;
}
