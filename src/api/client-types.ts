import type { z } from 'zod/v4';
import type { apiKeySchema } from './schemas/api-keys.js';
import type { approvalSchema } from './schemas/approvals.js';
import type { runSchema } from './schemas/runs.js';
import type { workerSchema } from './schemas/workers.js';
import type {
  compensationSchema,
  toolExecutionSchema,
  toolExecutionWithHistorySchema,
} from './schemas/tool-executions.js';

/** The API's answers, typed from the schemas the server validates them with. */
export type ToolExecution = z.output<typeof toolExecutionSchema>;
export type ToolExecutionWithHistory = z.output<typeof toolExecutionWithHistorySchema>;
export type Compensation = z.output<typeof compensationSchema>;
export type Run = z.output<typeof runSchema>;
export type Approval = z.output<typeof approvalSchema>;
export type ApiKey = z.output<typeof apiKeySchema>;
export type Worker = z.output<typeof workerSchema>;
export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}
