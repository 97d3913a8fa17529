export {
  scriptedModel,
  type Script,
  type ScriptStep,
  type ScriptToolCall,
  type ScriptUsage,
  type ScriptedModel,
  type ScriptedModelOptions,
} from './scripted-model.js';
export {
  callModel,
  isTransientModelFailure,
  DEFAULT_MODEL_RETRIES,
  type CallModelOptions,
  type ModelTurn,
  type ModelTurnPart,
  type ModelToolCall,
  type ModelUsage,
  type ModelDelta,
} from './call-model.js';
export { ModelPrompt } from './model-prompt.js';
export { createModel, type CreateModelOptions } from './providers.js';
export {
  modelConfigSchema,
  scriptStepsSchema,
  type ModelConfig,
  type ModelProvider,
} from './model-config.js';
export { modelProblem } from './model-version.js';
