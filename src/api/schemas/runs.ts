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
import { userContentSchema } from '../../runs/conversation.js';

export const usageSchema = z
  .object({
    input_tokens: z.number().int(),
    output_tokens: z.number().int(),
    reasoning_tokens: z.number().int().describe('Of the output, spent reasoning'),
    cached_input_tokens: z.number().int().describe("Of the input, read from the provider's cache"),
    total_tokens: z.number().int(),
  })
  .meta({ id: 'Usage' });

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
    turn: z
      .number()
      .int()
      .describe('The turn under way or last answered: 1 is the input, each message sent adds one'),
    usage: usageSchema.describe("What the model responses the run kept cost, every turn's"),
    token_budget: z
      .number()
      .int()
      .nullable()
      .describe(
        'Tokens the run may spend in all; it fails with RUN_BUDGET_EXCEEDED before a model call that would pass it',
      ),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: 'Run' });

export const createRunBody = z.strictObject({
  agent: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'an agent name is 1-64 characters of A-Z a-z 0-9 _ . -'),
  input: jsonValueSchema('The user message: a string, or any JSON'),
  run_id: runIdSchema.optional().describe('A client-chosen id makes creation idempotent'),
  token_budget: z
    .number()
    .int()
    .min(1)
    .max(Number.MAX_SAFE_INTEGER)
    .nullable()
    .optional()
    .describe(
      "Tokens the run may spend in all its turns; null for no limit; default the agent's token_budget",
    ),
});

const clientMessageIdSchema = z
  .string()
  .regex(/^[A-Za-z0-9_.-]{1,128}$/, 'a client message id is 1-128 characters of A-Z a-z 0-9 _ . -')
  .describe(
    'Your id for this message: sending it again (after a lost answer) is the same turn, never a second',
  );

export const sendMessageBody = z.strictObject({
  client_message_id: clientMessageIdSchema,
  content: userContentSchema.describe(
    'Text, or parts: {type:"text",text}, {type:"json",value} (read by the model as its JSON), ' +
      '{type:"image",image,mediaType?} and {type:"file",data,mediaType,filename?} (a URL, or base64 data)',
  ),
});

export const turnSchema = z
  .object({
    turn: z.number().int(),
    client_message_id: z.string(),
    message_index: z.number().int().describe("The message's place in the conversation (0-based)"),
    actor_id: z.string().nullable(),
    created_at: z.string(),
  })
  .meta({ id: 'Turn' });

export const sentMessageSchema = z.object({ turn: turnSchema, run: runSchema });

export const messagesQuery = z.strictObject({
  format: z
    .enum(['model', 'ui'])
    .default('model')
    .describe("model: the AI SDK's ModelMessages, as stored; ui: UIMessages, as useChat renders them"),
});

export const messagesSchema = z.object({
  format: z.enum(['model', 'ui']),
  messages: z.array(anyJsonSchema),
  turns: z.array(turnSchema).describe('The turns after the first: each message sent to the run'),
});

export const usageQuery = z.strictObject({
  from: z.iso.datetime().optional().describe('Count runs created at or after this time'),
  to: z.iso.datetime().optional().describe('Count runs created before this time'),
});

export const tenantUsageSchema = z
  .object({
    tenant_id: z.string(),
    runs: z.number().int(),
    usage: usageSchema,
    by_agent: z.array(z.object({ agent: z.string(), runs: z.number().int(), usage: usageSchema })),
  })
  .meta({ id: 'TenantUsage' });

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
