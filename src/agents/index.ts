export {
  defineAgent,
  repeatPolicyOf,
  repeatPoliciesSchema,
  ON_INDETERMINATE,
  DEFAULT_MAX_STEPS,
  type Agent,
  type AgentDefinition,
  type OnIndeterminate,
  type RepeatPolicies,
} from './define-agent.js';
