import { z } from 'zod/v4';
import { RUN_STATUSES } from '../../run-state/index.js';
import {
  anyJsonSchema,
  cursorSchema,
  errorInfoSchema,
  limitSchema,
  reasonSchema,
  runIdSchema,
} from './common.js';
import { jsonValueSchema } from './json-value.js';

export const runSchema = z
  .object({
    tenant_id: z.string(),
    run_id: z.string(),
    agent: z.string(),
    status: z.enum(RUN_STATUSES),
    input: anyJsonSchema,
    result: anyJsonSchema,
    error: errorInfoSchema.nullable(),
    status_reason: z.string().nullable(),
    step: z.number().int().describe('Model calls made so far'),
    pending_calls: z
      .array(
        z.object({
          idempotency_key: z.string(),
          tool_name: z.string(),
          heard: z.string().nullable().describe('What the model was told, once the call is settled'),
        }),
      )
      .describe('The calls of the last model response, until the model has heard them all'),
    lease: z.object({
      owner: z.string().nullable(),
      epoch: z.number().int(),
      expires_at: z.string().nullable(),
    }),
    checkpoint_version: z.number().int(),
    drive_attempts: z
      .number()
      .int()
      .describe('Claims since the last drive that ended cleanly; past the maximum the run fails'),
    model_outages: z.number().int().describe('Model calls in a row that failed for a transient cause'),
    last_error: errorInfoSchema
      .nullable()
      .describe('What the last failed drive or model outage said (the run goes on)'),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: 'Run' });

export const createRunBody = z.strictObject({
  agent: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'an agent name is 1-64 characters of A-Z a-z 0-9 _ . -'),
  input: jsonValueSchema('The user message: a string, or any JSON'),
  run_id: runIdSchema.optional().describe('A client-chosen id makes creation idempotent'),
});

export const listRunsQuery = z.strictObject({
  status: z.enum(RUN_STATUSES).optional(),
  agent: z
    .string()
    .regex(/^[A-Za-z0-9_.-]{1,64}$/)
    .optional(),
  limit: limitSchema,
  cursor: cursorSchema,
});

export const cancelRunBody = z.strictObject({ reason: reasonSchema });
export const retryRunBody = z.strictObject({ reason: reasonSchema });

export const runEventsQuery = z.strictObject({
  after: z.coerce
    .number()
    .int()
    .min(0)
    .max(Number.MAX_SAFE_INTEGER)
    .optional()
    .describe("Send only the run's events after this one (as the Last-Event-ID header does)"),
});

export const runEventSchema = z
  .object({
    id: z.number().int().describe("The event's number in its run: 1, 2, 3… without gaps"),
    at: z.string(),
    type: z.string(),
    data: anyJsonSchema,
  })
  .meta({ id: 'RunEvent' });
