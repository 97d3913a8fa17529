import type { ApiKeyStore } from './api-key-store.js';
import type { MonitorStore } from './monitor-store.js';
import type { RunStore } from './run-store.js';
import type { LoopStepStore } from './loop-step-store.js';
import type { WorkerStore } from './worker-store.js';
import type { ToolSlotStore } from './tool-slot-store.js';
import type { LedgerStore } from './ledger-store.js';
import type { WorkflowStore } from './workflow-store.js';

/**
 * Which store methods write, per part of the store; every other method only reads. The SQLite store
 * sends writes through its write lock and reads through a connection that never needs it, and a
 * schema newer than the code refuses the writes. A method added to an interface must be placed here:
 * the type lists every method name that is not a read.
 */
export const WRITE_METHODS = {
  ledger: ['reserve', 'reserveUnlessRepeat', 'transition', 'transitions', 'note', 'guardRepeats'],
  runs: [
    'create',
    'claimNext',
    'claim',
    'renewLease',
    'saveCheckpoint',
    'release',
    'retry',
    'sendMessage',
    'requeue',
    'cancel',
    'appendEvent',
    'createApprovals',
    'decideApproval',
    'consumeApproval',
  ],
  apiKeys: ['create', 'revoke'],
  loopSteps: ['record'],
  workers: ['heartbeat', 'remove'],
  toolSlots: ['acquire', 'renew', 'release'],
  workflows: ['create', 'claimDue', 'advance', 'move', 'wake'],
  monitor: [],
} as const satisfies {
  ledger: readonly Exclude<keyof LedgerStore, LedgerReads>[];
  runs: readonly Exclude<keyof RunStore, RunReads>[];
  apiKeys: readonly Exclude<keyof ApiKeyStore, ApiKeyReads>[];
  loopSteps: readonly Exclude<keyof LoopStepStore, LoopStepReads>[];
  workers: readonly Exclude<keyof WorkerStore, WorkerReads>[];
  toolSlots: readonly Exclude<keyof ToolSlotStore, 'held'>[];
  workflows: readonly Exclude<keyof WorkflowStore, WorkflowReads>[];
  monitor: readonly never[];
};

type LedgerReads = 'get' | 'getMany' | 'history' | 'list' | 'repeatsOf';
type RunReads =
  | 'get'
  | 'summary'
  | 'list'
  | 'listWaiting'
  | 'events'
  | 'lastClaims'
  | 'turns'
  | 'usage'
  | 'getApproval'
  | 'approvalsOfRun'
  | 'approvalsOfRuns'
  | 'listApprovals';
type ApiKeyReads = 'findByHash' | 'get' | 'list';
type LoopStepReads = 'get' | 'list';
type WorkerReads = 'list';
type WorkflowReads = 'get' | 'list' | 'events';
type Unplaced<S, Reads, Writes extends readonly string[]> = Exclude<keyof S, Reads | Writes[number]>;
/** Fails to compile when a method of a store interface is neither a listed read nor a listed write. */
const everyMethodPlaced: [
  Unplaced<LedgerStore, LedgerReads, typeof WRITE_METHODS.ledger>,
  Unplaced<RunStore, RunReads, typeof WRITE_METHODS.runs>,
  Unplaced<ApiKeyStore, ApiKeyReads, typeof WRITE_METHODS.apiKeys>,
  Unplaced<LoopStepStore, LoopStepReads, typeof WRITE_METHODS.loopSteps>,
  Unplaced<WorkerStore, WorkerReads, typeof WRITE_METHODS.workers>,
  Unplaced<ToolSlotStore, 'held', typeof WRITE_METHODS.toolSlots>,
  Unplaced<WorkflowStore, WorkflowReads, typeof WRITE_METHODS.workflows>,
] extends [never, never, never, never, never, never, never]
  ? true
  : false = true;
void everyMethodPlaced;
/** Every MonitorStore method reads. */
export type MonitorReads = keyof MonitorStore;

export type StorePart = keyof typeof WRITE_METHODS;

const WRITES: Record<StorePart, ReadonlySet<string>> = {
  ledger: new Set(WRITE_METHODS.ledger),
  runs: new Set(WRITE_METHODS.runs),
  apiKeys: new Set(WRITE_METHODS.apiKeys),
  loopSteps: new Set(WRITE_METHODS.loopSteps),
  workers: new Set(WRITE_METHODS.workers),
  toolSlots: new Set(WRITE_METHODS.toolSlots),
  workflows: new Set(WRITE_METHODS.workflows),
  monitor: new Set<string>(),
};

export function isWriteMethod(part: StorePart, method: string): boolean {
  return WRITES[part].has(method);
}
