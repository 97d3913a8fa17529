import { z } from 'zod/v4';
import { TOGETHER_MAX } from '../../runs/operator-calls.js';
import { executionKeySchema, reasonSchema } from './common.js';
import { jsonValueSchema } from './json-value.js';
import { ledgerEventSchema, toolExecutionSchema } from './tool-executions.js';

export const incidentsQuery = z.strictObject({
  q: z
    .string()
    .max(200)
    .optional()
    .describe(
      'Words every shown call matches (case-insensitive): in its idempotency key, run id, tool, downstream, ' +
        'or any argument value (an account id, an order, an amount)',
    ),
  tool: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,64}$/, 'a tool name is 1-64 characters of A-Z a-z 0-9 _ -')
    .optional(),
});

export const incidentGroupSchema = z.object({
  tool_name: z.string(),
  downstream: z
    .string()
    .nullable()
    .describe(
      "The tool's declared downstream (defineTool's downstream); null when not declared or not known here",
    ),
  effect: z.string(),
  can_ask_hook: z.boolean().describe('This server knows the tool and it has a reconcile hook'),
  count: z.number().int(),
  oldest_attempt_started_at: z.string(),
  calls: z.array(toolExecutionSchema).describe('Longest waiting first'),
});

export const incidentsSchema = z
  .object({
    tenant_id: z.string(),
    q: z.string().nullable(),
    unknown: z.number().int().describe('Unknown calls read (up to 1000)'),
    matched: z.number().int().describe('Of those, the ones the search matched'),
    capped: z.boolean().describe('More than 1000 calls are unknown: only the 1000 longest waiting were read'),
    groups: z.array(incidentGroupSchema).describe('By tool and downstream, the group waiting longest first'),
  })
  .meta({ id: 'Incidents' });

export const resolveTogetherBody = z.strictObject({
  keys: z
    .array(executionKeySchema)
    .min(1)
    .max(TOGETHER_MAX)
    .describe(`The calls checked together (1-${TOGETHER_MAX})`),
  status: z.enum(['completed', 'failed']).describe('completed: they took effect; failed: they did not'),
  reason: reasonSchema,
  result: jsonValueSchema('With completed: the result every one of them would have returned').optional(),
  result_reference: z.string().min(1).max(512).nullable().optional(),
  force: z
    .boolean()
    .optional()
    .describe('Settle started calls whose attempt may still be running; recorded as forced on each'),
});

export const resolvedTogetherSchema = z.object({
  tenant_id: z.string(),
  together: z.string().describe("The batch's id, in each settled call's history (detail.together)"),
  settled: z.array(toolExecutionSchema).describe('The calls this request settled'),
  moved_on: z
    .array(
      z.object({
        idempotency_key: z.string(),
        code: z.string().describe('LEDGER_ALREADY_SETTLED, CALL_IN_FLIGHT or LEDGER_RECORD_NOT_FOUND'),
        message: z.string(),
        record: toolExecutionSchema.nullable().describe('The call as it stands'),
      }),
    )
    .describe('The calls left as they stand, each with why'),
});

export const hookAskedSchema = z.object({
  record: toolExecutionSchema.describe('The call as it stands after the answer was recorded'),
  said: ledgerEventSchema
    .nullable()
    .describe("The hook's answer as the history recorded it: a transition (it settled the call) or a note"),
});
