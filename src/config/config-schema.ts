import { z } from 'zod/v4';
import { ON_INDETERMINATE } from '../agents/index.js';
import { modelConfigSchema } from '../models/index.js';

/** One agent as written in `oncely.yaml`. */
const agentSchema = z.strictObject({
  name: z.string().min(1),
  instructions: z.string(),
  /** A key of `models`. */
  model: z.string().min(1),
  /** Names of tools exported by the tools module. */
  tools: z.array(z.string().min(1)).optional(),
  tool_policy: z.strictObject({ on_indeterminate: z.enum(ON_INDETERMINATE).optional() }).optional(),
  max_steps: z.number().int().min(1).max(1000).optional(),
  model_timeout_ms: z.number().int().min(1).max(3_600_000).optional(),
  model_outage_retries: z.number().int().min(0).max(1000).optional(),
});

/** How the runtime treats failures: `runtime:` in `oncely.yaml`. */
const runtimeSchema = z.strictObject({
  max_drive_attempts: z.number().int().min(1).max(1000).optional(),
  max_attempts_per_call: z.number().int().min(1).max(100).optional(),
  landing_margin_ms: z.number().int().min(0).max(3_600_000).optional(),
});

/** The `oncely.yaml` document. Keys are snake_case; unknown keys are errors. */
export const configDocumentSchema = z.strictObject({
  storage: z.strictObject({ database_url: z.string().min(1).optional() }).optional(),
  /** A module, relative to the file, whose exported tools are registered by name. */
  tools: z.string().min(1).optional(),
  models: z.record(z.string(), modelConfigSchema).optional(),
  agents: z.array(agentSchema).optional(),
  runtime: runtimeSchema.optional(),
});

export type ConfigDocument = z.infer<typeof configDocumentSchema>;
export type AgentDocument = z.infer<typeof agentSchema>;
