import { z } from 'zod/v4';
import { anyJsonSchema, runIdSchema } from './common.js';
import { toolExecutionSchema } from './tool-executions.js';

/** A loop's calls carry run ids under the ledger's one rule (1-128 of `A-Z a-z 0-9 _ . -`). */
export const loopRunIdSchema = runIdSchema.describe("A run id of an application's own loop");

const loopPartSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text'), text: z.string() }),
  z.object({ type: z.literal('reasoning'), text: z.string() }),
  z.object({
    type: z.literal('tool-call'),
    tool_call_id: z.string(),
    tool_name: z.string(),
    input: anyJsonSchema.describe('The arguments as the model wrote them'),
    provider_executed: z.boolean().describe('Run by the provider itself, not through the ledger'),
    idempotency_key: z
      .string()
      .nullable()
      .describe('<run_id>:<tool_call_id> when the ledger holds the call; null otherwise'),
  }),
  z.object({ type: z.literal('other'), kind: z.string().describe('A part the console does not show') }),
]);

export const loopStepSchema = z.object({
  step: z.number().int().describe('0 for the first model response, then one more for each'),
  framework: z.enum(['ai-sdk', 'openai-agents']),
  model_id: z.string(),
  created_at: z.string(),
  usage: z
    .object({ input_tokens: z.number(), output_tokens: z.number(), total_tokens: z.number() })
    .nullable(),
  parts: z.array(loopPartSchema),
});

export const loopRunSchema = z
  .object({
    tenant_id: z.string(),
    run_id: z.string(),
    framework: z
      .enum(['ai-sdk', 'openai-agents'])
      .nullable()
      .describe('The loop that recorded its responses; null when only calls were made under the run id'),
    steps: z.array(loopStepSchema).describe('The recorded model responses, in order'),
    calls: z.array(toolExecutionSchema).describe("The run's calls in the ledger, oldest first (up to 500)"),
    unknown_calls: z.number().int().describe('Of those, how many are started or indeterminate'),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: 'LoopRun' });
