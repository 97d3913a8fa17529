export {
  defineAgent,
  ON_INDETERMINATE,
  DEFAULT_MAX_STEPS,
  type Agent,
  type AgentDefinition,
  type OnIndeterminate,
} from './define-agent.js';
