export {
  defineWorkflow,
  recoveryProblems,
  nodeRunId,
  workflowRunIdOf,
  RECOVERY_POLICIES,
  type RecoveryPolicy,
  type Workflow,
  type WorkflowContext,
  type WorkflowDefinition,
  type WorkflowNode,
  type WorkflowNodeDefinition,
} from './define-workflow.js';
export {
  WorkflowEngine,
  DEFAULT_WORKFLOW_LEASE_MS,
  WORKFLOW_DECISIONS,
  type WorkflowDecision,
  isFinalWorkflowStatus,
  type StartWorkflowRequest,
  type WorkflowRunView,
  type WorkflowEngineOptions,
} from './engine.js';
export { planWorkflow, type NodeState, type NodeView, type NodeAttempt, type StandingCall } from './plan.js';
