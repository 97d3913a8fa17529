import { z } from 'zod/v4';
import { WORKFLOW_STATUSES } from '../../store/workflow-store.js';
import { WORKFLOW_RUN_ID } from '../../workflows/define-workflow.js';
import { WORKFLOW_DECISIONS } from '../../workflows/engine.js';
import {
  anyJsonSchema,
  cursorSchema,
  errorInfoSchema,
  limitSchema,
  reasonSchema,
  runIdSchema,
} from './common.js';

export const workflowRunIdSchema = z
  .string()
  .regex(WORKFLOW_RUN_ID, 'use 1-96 characters of A-Z a-z 0-9 _ . -')
  .describe('A workflow run id');

const NODE_STATES = ['waiting', 'running', 'completed', 'skipped', 'failed', 'retrying', 'blocked'] as const;

export const workflowNodeSchema = z
  .object({
    name: z.string(),
    agent: z.string(),
    state: z.enum(NODE_STATES),
    reason: z.string().nullable(),
    attempts: z.array(
      z.object({
        attempt: z.number().int(),
        run_id: runIdSchema,
        status: z.string().nullable().describe("The run's status; null if it cannot be read"),
      }),
    ),
    standing_calls: z
      .array(
        z.object({
          idempotency_key: z.string(),
          tool_name: z.string(),
          status: z.string(),
          conflict: z.boolean().describe('Settled failed, then an effect landed'),
          result_reference: z.string().nullable(),
        }),
      )
      .describe(
        "When its latest run failed or was cancelled: that run's non-read calls that took effect or may have " +
          '(a fresh run has new keys and could repeat them)',
      ),
  })
  .meta({ id: 'WorkflowNode' });

export const workflowRunSchema = z
  .object({
    workflow_run_id: workflowRunIdSchema,
    workflow: z.string(),
    tenant_id: z.string(),
    status: z.enum(WORKFLOW_STATUSES),
    status_reason: z.string().nullable(),
    input: anyJsonSchema,
    result: anyJsonSchema.nullable(),
    error: errorInfoSchema.nullable(),
    created_at: z.string(),
    updated_at: z.string(),
    nodes: z
      .array(workflowNodeSchema)
      .optional()
      .describe('Each node, in order (one workflow run read alone)'),
  })
  .meta({ id: 'WorkflowRun' });

export const startWorkflowBody = z.strictObject({
  workflow: z.string().min(1).max(64),
  input: anyJsonSchema,
  workflow_run_id: workflowRunIdSchema
    .optional()
    .describe('Makes starting idempotent: the same workflow and input answer 200 with the run that stands'),
});

export const listWorkflowRunsQuery = z.strictObject({
  status: z.enum(WORKFLOW_STATUSES).optional(),
  workflow: z.string().min(1).max(64).optional(),
  limit: limitSchema,
  cursor: cursorSchema,
});

export const cancelWorkflowBody = z.strictObject({ reason: reasonSchema });

export const decideWorkflowBody = z.strictObject({
  node: z.string().min(1).max(24),
  action: z
    .enum(WORKFLOW_DECISIONS)
    .describe(
      "retry: start the node again (a fresh run, new keys, told of the failed run's standing calls); " +
        'skip: skip the node (and the nodes needing it) and go on; fail: end the workflow run',
    ),
  reason: reasonSchema,
});

export const workflowEventsQuery = z.strictObject({
  after: z.coerce.number().int().min(0).optional().describe('Events after this id (or send Last-Event-ID)'),
});
