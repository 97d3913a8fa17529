import type { z } from 'zod/v4';
import type { apiKeySchema } from './schemas/api-keys.js';
import type { approvalSchema } from './schemas/approvals.js';
import type { messagesSchema, runSchema, sentMessageSchema, tenantUsageSchema } from './schemas/runs.js';
import type { workerSchema } from './schemas/workers.js';
import type { hookAskedSchema, incidentsSchema, resolvedTogetherSchema } from './schemas/incidents.js';
import type {
  compensationSchema,
  toolExecutionSchema,
  toolExecutionWithHistorySchema,
} from './schemas/tool-executions.js';

/** The API's answers, typed from the schemas the server validates them with. */
export type ToolExecution = z.output<typeof toolExecutionSchema>;
export type ToolExecutionWithHistory = z.output<typeof toolExecutionWithHistorySchema>;
export type Compensation = z.output<typeof compensationSchema>;
export type Incidents = z.output<typeof incidentsSchema>;
export type ResolvedTogether = z.output<typeof resolvedTogetherSchema>;
export type HookAsked = z.output<typeof hookAskedSchema>;
export type Run = z.output<typeof runSchema>;
export type SentMessage = z.output<typeof sentMessageSchema>;
export type RunMessages = z.output<typeof messagesSchema>;
export type TenantUsage = z.output<typeof tenantUsageSchema>;
export type Approval = z.output<typeof approvalSchema>;
export type ApiKey = z.output<typeof apiKeySchema>;
export type Worker = z.output<typeof workerSchema>;
export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

/** A workflow run as the API answers it (`nodes` when read alone). */
export interface WorkflowRun {
  workflow_run_id: string;
  workflow: string;
  tenant_id: string;
  status: string;
  status_reason: string | null;
  input: unknown;
  result: unknown;
  error: { code: string; message: string } | null;
  created_at: string;
  updated_at: string;
  nodes?: {
    name: string;
    agent: string;
    state: string;
    reason: string | null;
    attempts: { attempt: number; run_id: string; status: string | null }[];
    standing_calls: {
      idempotency_key: string;
      tool_name: string;
      status: string;
      conflict: boolean;
      result_reference: string | null;
    }[];
  }[];
}
