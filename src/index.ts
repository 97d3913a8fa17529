/**
 * oncely: a durable agent runtime in which a tool call with a side effect takes effect once, or is
 * honestly recorded as unknown.
 */
export {
  defineTool,
  read,
  write,
  external,
  destructive,
  isTool,
  DEFAULT_TIMEOUT_MS,
  MAX_READ_ATTEMPTS,
  type Tool,
  type ToolDefinition,
  type ToolContext,
  type Effect,
  type ReconcileOutcome,
  type ReconcileHook,
  type CompensateHook,
} from './tools/index.js';
export { runTraceId } from './tracing/index.js';
export {
  OncelyError,
  ToolNotAttemptedError,
  ToolContractError,
  isOncelyError,
  ERROR_CODES,
  type ErrorCode,
} from './errors/index.js';
export {
  LEDGER_STATUSES,
  UNKNOWN_STATUSES,
  TRANSITIONS,
  isUnknownStatus,
  idempotencyKey,
  compensationKey,
  parseKey,
  canonicalJson,
  argsDigest,
  isUnknownCall,
  attemptDeadline,
  type LedgerStatus,
  type EffectKind,
  type TransitionVia,
  type Actor,
  type JsonValue,
  type ErrorInfo,
  type ToolExecutionRecord,
  type LedgerEvent,
} from './ledger/index.js';
export {
  Ledger,
  openLedger,
  executeToolCall,
  executeToolCalls,
  resolveToolCall,
  compensateToolCall,
  getToolCall,
  listUnknownCalls,
  unknownCallCursor,
  decideToolApproval,
  type LedgerOptions,
  type LedgerLog,
  type CallIdentity,
  type CallOptions,
  type ToolCallRequest,
  type ToolCallOutcome,
  type ResolveRequest,
  type CompensateRequest,
  type CompensationOutcome,
} from './calls/index.js';
export {
  openStore,
  DEFAULT_DATABASE_URL,
  type Store,
  type StoreDialect,
  type LedgerStore,
  type OpenStoreOptions,
  type SchemaState,
  type MigrationReport,
} from './store/index.js';
export {
  defineAgent,
  ON_INDETERMINATE,
  DEFAULT_MAX_STEPS,
  type Agent,
  type AgentDefinition,
  type OnIndeterminate,
} from './agents/index.js';
export {
  scriptedModel,
  callModel,
  createModel,
  ModelPrompt,
  type CallModelOptions,
  type Script,
  type ScriptStep,
  type ScriptToolCall,
  type ScriptedModel,
  type ModelTurn,
  type ModelToolCall,
} from './models/index.js';
export { loadConfig, type OncelyConfig, type LoadConfigOptions } from './config/index.js';
export {
  Runtime,
  openRuntime,
  DEFAULT_LEASE_MS,
  type RuntimeOptions,
  type StartRunRequest,
  type RecoveredRun,
  type DriveEnd,
  type ApprovalDecision,
} from './runs/index.js';
export { startWorker, type Worker, type WorkerOptions, type WorkerLog } from './worker/index.js';
export {
  RUN_STATUSES,
  HEARD_KINDS,
  type RunStatus,
  type RunRecord,
  type RunSummary,
  type RunEvent,
  type Checkpoint,
  type PendingCall,
  type HeardResult,
  type HeardKind,
  type ApprovalRecord,
  type ApprovalStatus,
} from './run-state/index.js';
