export type { Store, StoreTx, StoreDialect, SchemaState, MigrationReport } from './store.js';
export type {
  InlineRepeatScope,
  LedgerStore,
  ReserveRequest,
  ReserveResult,
  TransitionRequest,
  TransitionResult,
  NoteRequest,
  ListFilter,
  ListCursor,
} from './ledger-store.js';
export {
  openStore,
  connectStore,
  assertLedgerExists,
  timeoutsFromEnv,
  DEFAULT_DATABASE_URL,
  type OpenStoreOptions,
} from './open-store.js';
export { assertSchemaCurrent } from './migrations.js';
export { foreseenRecord } from './rows.js';
// The drivers' classes are not re-exported here: openStore loads each only for a URL of its kind.
export type { PostgresStoreOptions, PostgresTimeouts } from './postgres/index.js';
export type {
  RunStore,
  RunFence,
  CreateRunRequest,
  SaveCheckpointRequest,
  ReleaseRequest,
  RunEventInput,
  RunListFilter,
  NewApproval,
  ApprovalListFilter,
  WaitingCursor,
  WaitingRun,
  SendMessageRequest,
  SendMessageResult,
  UsageFilter,
  TenantUsage,
} from './run-store.js';
export {
  API_KEY_ROLES,
  type ApiKeyRole,
  type ApiKeyRecord,
  type ApiKeyStore,
  type NewApiKey,
  type ApiKeyListFilter,
} from './api-key-store.js';
export type {
  ReserveStepRequest,
  ReserveStepResult,
  RecordStepRequest,
  RecordStepResult,
} from './step-writes.js';
export type {
  MonitorStore,
  StoreStats,
  UnknownCallFilter,
  UnknownCallOfRun,
  UnknownCallPosition,
} from './monitor-store.js';
export type { LoopStep, LoopStepStore, NewLoopStep } from './loop-step-store.js';
export type { HeldRun, WorkerBeat, WorkerStore, WorkerView } from './worker-store.js';
export type { ToolSlotStore } from './tool-slot-store.js';
export type { RunEventWatch, WakeKind, WakeListener, WakeListenOptions, Wakeups } from './wakeups.js';
