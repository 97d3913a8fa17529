import { z } from 'zod/v4';
import { EFFECT_KINDS, LEDGER_STATUSES, TRANSITION_VIAS, EVENT_KINDS } from '../../ledger/index.js';
import {
  anyJsonSchema,
  cursorSchema,
  errorInfoSchema,
  limitSchema,
  reasonSchema,
  runIdSchema,
} from './common.js';
import { jsonValueSchema } from './json-value.js';

export const actorSchema = z.object({
  kind: z.enum(['runtime', 'reconcile', 'operator']),
  id: z.string().describe('A process (runtime), or the actor id of an API key (operator)'),
});

export const toolExecutionSchema = z
  .object({
    tenant_id: z.string(),
    idempotency_key: z.string(),
    run_id: z.string(),
    tool_call_id: z.string(),
    tool_name: z.string(),
    effect: z.enum(EFFECT_KINDS),
    status: z.enum(LEDGER_STATUSES),
    attempt: z.number().int(),
    version: z.number().int(),
    args: anyJsonSchema,
    args_digest: z.string(),
    result: anyJsonSchema,
    result_reference: z.string().nullable(),
    error: errorInfoSchema.nullable(),
    compensation_of: z.string().nullable(),
    created_at: z.string(),
    updated_at: z.string(),
    attempt_started_at: z.string().describe('An unknown call has been waiting since then'),
    settled_at: z.string().nullable(),
    settled_by: actorSchema.nullable(),
    attempt_timeout_ms: z
      .number()
      .int()
      .nullable()
      .describe('How long the current attempt may run; until then (plus a margin) it may still land'),
    conflict_at: z
      .string()
      .nullable()
      .describe('When a real outcome first contradicted the settled record (see the conflict events)'),
  })
  .meta({ id: 'ToolExecution' });

export const ledgerEventSchema = z
  .object({
    id: z.number().int(),
    at: z.string(),
    kind: z
      .enum(EVENT_KINDS)
      .describe(
        'transition; ignored (arrived after the call was settled, and agrees or cannot tell); note; ' +
          'conflict (a real outcome that contradicts the settled record: check downstream)',
      ),
    actor: actorSchema,
    via: z.enum(TRANSITION_VIAS).nullable(),
    from: z.enum(LEDGER_STATUSES).nullable(),
    to: z.enum(LEDGER_STATUSES).nullable(),
    attempt: z.number().int(),
    reason: z.string().nullable(),
    detail: anyJsonSchema,
  })
  .meta({ id: 'LedgerEvent' });

export const toolExecutionWithHistorySchema = z.object({
  record: toolExecutionSchema,
  history: z.array(ledgerEventSchema),
});

export const EXECUTION_FILTERS = ['unknown', 'all', 'conflict', ...LEDGER_STATUSES] as const;

export const listExecutionsQuery = z.strictObject({
  status: z
    .enum(EXECUTION_FILTERS)
    .default('unknown')
    .describe(
      'unknown (default): indeterminate calls, and started calls no live worker holds; all; ' +
        'conflict: calls a real outcome contradicted after they were settled; or one status',
    ),
  run_id: runIdSchema.optional(),
  tool: z
    .string()
    .regex(/^[A-Za-z0-9_-]{1,64}$/, 'a tool name is 1-64 characters of A-Z a-z 0-9 _ -')
    .optional(),
  limit: limitSchema,
  cursor: cursorSchema,
});

export const resolveBody = z.strictObject({
  status: z.enum(['completed', 'failed']).describe('completed: it took effect; failed: it did not'),
  reason: reasonSchema,
  result: jsonValueSchema('With completed: the result the tool would have returned').optional(),
  result_reference: z.string().min(1).max(512).nullable().optional(),
  force: z
    .boolean()
    .optional()
    .describe(
      'Settle a started call whose attempt may still be running (409 CALL_IN_FLIGHT without it); recorded as forced',
    ),
});

export const compensateBody = z.strictObject({ reason: reasonSchema });

export const compensationSchema = z.object({
  status: z
    .enum(['compensated', 'failed', 'in_progress', 'unknown'])
    .describe(
      'compensated: undone; failed: the hook refused before acting; in_progress: the hook is running ' +
        'now, or its last attempt may still land (it is never run twice); unknown: settle the compensation',
    ),
  record: toolExecutionSchema.describe('The call that was compensated, as it now stands'),
  compensation: toolExecutionSchema.describe('The compensation record, <key>:compensation'),
});
