import { z } from 'zod/v4';
import { APPROVAL_STATUSES } from '../../run-state/index.js';
import { anyJsonSchema, cursorSchema, limitSchema, reasonSchema } from './common.js';
import { toolExecutionSchema } from './tool-executions.js';

export const approvalSchema = z
  .object({
    tenant_id: z.string(),
    idempotency_key: z.string().describe('The call it approves; also the approval id'),
    run_id: z.string(),
    tool_name: z.string(),
    args: anyJsonSchema.describe('The exact arguments it approves'),
    args_digest: z.string(),
    repeat_of: z
      .string()
      .nullable()
      .describe(
        'Asked for because this call repeats an earlier call of its run (or tenant) that took effect or may ' +
          "have: that call's key. Null for a tool's own approval",
      ),
    earlier: toolExecutionSchema
      .nullable()
      .describe(
        'With repeat_of: the earlier call as it stands now (status, args, result, reference), to compare ' +
          'with this one. Null when this is not a repeat',
      ),
    status: z.enum(APPROVAL_STATUSES),
    decided_by: z.string().nullable(),
    reason: z.string().nullable(),
    created_at: z.string(),
    decided_at: z.string().nullable(),
    consumed_at: z.string().nullable(),
  })
  .meta({ id: 'Approval' });

export const listApprovalsQuery = z.strictObject({
  status: z.enum(APPROVAL_STATUSES).optional().describe('Default: every status, pending first'),
  limit: limitSchema,
  cursor: cursorSchema,
});

export const approveBody = z.strictObject({ reason: reasonSchema.optional() });
export const rejectBody = z.strictObject({ reason: reasonSchema.describe('Required: the model hears it') });
