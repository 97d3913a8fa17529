import { z } from 'zod/v4';
import { ON_INDETERMINATE, repeatPoliciesSchema } from '../agents/index.js';
import { REPEAT_POLICIES } from '../ledger/index.js';
import { modelConfigSchema } from '../models/index.js';

/** One agent as written in `oncely.yaml`. */
const agentSchema = z.strictObject({
  name: z.string().min(1),
  instructions: z.string(),
  /** A key of `models`. */
  model: z.string().min(1),
  /** Names of tools exported by the tools module. */
  tools: z.array(z.string().min(1)).optional(),
  tool_policy: z
    .strictObject({
      on_indeterminate: z.enum(ON_INDETERMINATE).optional(),
      /** `ask`, `refuse` or `allow`; or `{ default, tools: { name: policy } }`. */
      on_repeat: repeatPoliciesSchema.optional(),
    })
    .optional(),
  max_steps: z.number().int().min(1).max(1000).optional(),
  token_budget: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional(),
  stream: z.boolean().optional(),
  model_timeout_ms: z.number().int().min(1).max(3_600_000).optional(),
  model_outage_retries: z.number().int().min(0).max(1000).optional(),
});

/** A condition on an earlier node's result text (its `text`, or its JSON): one test. */
const whenSchema = z
  .strictObject({
    node: z.string().min(1),
    equals: z.string().optional(),
    contains: z.string().optional(),
    matches: z.string().min(1).optional(),
    /** Turns the test around: the node runs when it does not hold. */
    not: z.boolean().optional(),
  })
  .refine((w) => [w.equals, w.contains, w.matches].filter((t) => t !== undefined).length === 1, {
    message: 'give one test: equals, contains or matches (a regular expression)',
  });

/** A template: text with `{{input.field}}` and `{{nodes.<node>.text}}`, or JSON whose texts are templates. */
const templateSchema = z.unknown();

/** One node of a workflow: an agent run. */
const workflowNodeSchema = z.strictObject({
  agent: z.string().min(1),
  needs: z.array(z.string().min(1)).optional(),
  input: templateSchema.optional(),
  when: whenSchema.optional(),
  recovery_policy: z.enum(['fail', 'pause', 'retry']).optional(),
  max_attempts: z.number().int().min(1).max(20).optional(),
  backoff_ms: z.number().int().min(0).max(86_400_000).optional(),
});

const workflowSchema = z.strictObject({
  name: z.string().min(1),
  /** A JSON Schema the input must match. */
  input_schema: z.record(z.string(), z.unknown()).optional(),
  nodes: z.record(z.string(), workflowNodeSchema),
  result: templateSchema.optional(),
});

/** How the runtime treats failures: `runtime:` in `oncely.yaml`. */
const runtimeSchema = z.strictObject({
  max_drive_attempts: z.number().int().min(1).max(1000).optional(),
  max_attempts_per_call: z.number().int().min(1).max(100).optional(),
  landing_margin_ms: z.number().int().min(0).max(3_600_000).optional(),
  tool_slot_lease_ms: z.number().int().min(100).max(3_600_000).optional(),
});

const EFFECT_KINDS = ['read', 'write', 'external', 'destructive'] as const;

/** An MCP tool's effect, where its annotations do not say enough: a kind, or a kind with an approval. */
const mcpEffectSchema = z.union([
  z.enum(EFFECT_KINDS),
  z.strictObject({ kind: z.enum(EFFECT_KINDS), approval: z.boolean().optional() }),
]);

/**
 * An MCP server whose tools agents may use: a command oncely starts (stdio) or a URL (streamable
 * HTTP). `${VAR}` in `env` and `headers` values is taken from the environment.
 */
const mcpServerSchema = z
  .strictObject({
    command: z.string().min(1).optional(),
    args: z.array(z.string()).optional(),
    env: z.record(z.string(), z.string()).optional(),
    /** The command's working folder, relative to the file. */
    cwd: z.string().min(1).optional(),
    url: z.url({ protocol: /^https?$/ }).optional(),
    headers: z.record(z.string(), z.string()).optional(),
    /** Joined to each tool's name with `_` (`crm` → `crm_find`); default the server's name; "" for none. */
    prefix: z
      .string()
      .regex(/^[A-Za-z0-9_-]{0,32}$/, 'use up to 32 characters of A-Z a-z 0-9 _ -')
      .optional(),
    only: z.array(z.string().min(1)).optional(),
    effects: z.record(z.string(), mcpEffectSchema).optional(),
    /** `server`: settle a tool's unknown calls through the server's key lookup (a server guarded by onceOnly). */
    reconcile: z.record(z.string(), z.literal('server')).optional(),
    /** A tool's repeat policy, by its name on the server: `ask`, `refuse` or `allow`. */
    on_repeat: z.record(z.string(), z.enum(REPEAT_POLICIES)).optional(),
    /** What makes two calls of a tool the same effect: these arguments, by its name on the server. */
    repeat_key: z.record(z.string(), z.array(z.string().min(1)).min(1)).optional(),
    timeout_ms: z.number().int().min(1).max(86_400_000).optional(),
  })
  .refine((s) => (s.command === undefined) !== (s.url === undefined), {
    message: 'give either command (a server oncely starts, over stdio) or url (streamable HTTP), not both',
  })
  .refine((s) => s.url === undefined || (s.args ?? s.env ?? s.cwd) === undefined, {
    message: 'args, env and cwd are for a command; a url server takes headers',
  })
  .refine((s) => s.command === undefined || s.headers === undefined, {
    message: 'headers are for a url server; a command takes env',
  });

/** The `oncely.yaml` document. Keys are snake_case; unknown keys are errors. */
export const configDocumentSchema = z.strictObject({
  storage: z.strictObject({ database_url: z.string().min(1).optional() }).optional(),
  /** A module, relative to the file, whose exported tools are registered by name. */
  tools: z.string().min(1).optional(),
  /** MCP servers whose tools join the tools module's, as `<prefix>_<tool>`. */
  mcp_servers: z.record(z.string().regex(/^[A-Za-z0-9_-]{1,32}$/), mcpServerSchema).optional(),
  /** Calls of a tool running at once across every process sharing the store, by tool name. */
  tool_concurrency: z.record(z.string(), z.number().int().min(1).max(10_000)).optional(),
  models: z.record(z.string(), modelConfigSchema).optional(),
  agents: z.array(agentSchema).optional(),
  workflows: z.array(workflowSchema).optional(),
  runtime: runtimeSchema.optional(),
});

export type ConfigDocument = z.infer<typeof configDocumentSchema>;
export type AgentDocument = z.infer<typeof agentSchema>;
export type McpServerDocument = z.infer<typeof mcpServerSchema>;
export type WorkflowDocument = z.infer<typeof workflowSchema>;
export type WhenDocument = z.infer<typeof whenSchema>;
