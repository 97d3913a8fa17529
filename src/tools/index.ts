export {
  read,
  write,
  external,
  destructive,
  backoffDelay,
  attemptBudgetMs,
  effectProblem,
  MAX_READ_ATTEMPTS,
  type Effect,
  type ReadOptions,
  type WriteOptions,
  type ApprovalOptions,
} from './effects.js';
export {
  defineTool,
  isTool,
  assertTool,
  parseToolArgs,
  repeatDigestOf,
  DEFAULT_TIMEOUT_MS,
  type Tool,
  type ToolDefinition,
  type ToolContext,
  type ReconcileOutcome,
  type ReconcileHook,
  type CompensateHook,
} from './define-tool.js';
export {
  toolInputOf,
  type ToolInputSchema,
  type JsonSchemaObject,
  type InputOf,
  type ToolInput,
} from './tool-input.js';
export { strictJsonSchema, fromStrictArgs } from './strict-schema.js';
