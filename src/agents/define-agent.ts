import type { OncelyLanguageModel } from '../models/ai-runtime.js';
import { modelProblem } from '../models/model-version.js';
import { z } from 'zod/v4';
import { OncelyError } from '../errors/index.js';
import { DEFAULT_REPEAT_POLICY, REPEAT_POLICIES, type RepeatPolicy } from '../ledger/index.js';
import { isTool, type Tool } from '../tools/index.js';

/** What a run does when a tool call's outcome is unknown (DESIGN §6). */
export const ON_INDETERMINATE = ['pause', 'fail'] as const;
export type OnIndeterminate = (typeof ON_INDETERMINATE)[number];

export interface AgentDefinition {
  /** 1-64 of `A-Z a-z 0-9 _ . -`; runs name their agent by it. */
  readonly name: string;
  readonly instructions: string;
  readonly model: OncelyLanguageModel;
  readonly tools: readonly Tool[];
  readonly toolPolicy?: {
    readonly onIndeterminate?: OnIndeterminate;
    /**
     * What happens when the model makes a call that repeats an earlier call of the run that took
     * effect or may have (same tool, same `repeatKey`): `ask` an operator (the default), `refuse`
     * it (the model hears the earlier outcome), or `allow` it. One policy for every tool, or a
     * default and per-tool policies; a tool's own `onRepeat` comes between the two.
     */
    readonly onRepeat?: RepeatPolicy | RepeatPolicies;
  };
  /** Model calls per turn of a run before it fails with `RUN_MAX_STEPS`; default 20. */
  readonly maxSteps?: number;
  /**
   * Tokens a run of this agent may spend in all its turns before it ends with `RUN_BUDGET_EXCEEDED`
   * (checked before each model call); a run started with its own budget uses that. Default: no limit.
   */
  readonly tokenBudget?: number;
  /**
   * Stream each model response (the model's `doStream`): its text and tool-call deltas reach the
   * run's event streams as they arrive, while the run keeps the whole response once it is complete.
   * Default false (one `doGenerate` call a step: less work where nobody watches).
   */
  readonly stream?: boolean;
  /** How long one model call may take, its retries included, before it counts as an outage; default 120000. */
  readonly modelTimeoutMs?: number;
  /**
   * Model outages in a row (a timeout, or transient errors after the SDK's retries) the run waits
   * out, requeued with backoff, before it fails; default 8.
   */
  readonly modelOutageRetries?: number;
}

/** An agent's repeat policies: per tool, then the tool's own, then `default`. */
export interface RepeatPolicies {
  readonly default?: RepeatPolicy;
  readonly tools?: Readonly<Record<string, RepeatPolicy>>;
}

export interface Agent {
  readonly name: string;
  readonly instructions: string;
  readonly model: OncelyLanguageModel;
  readonly tools: readonly Tool[];
  readonly toolPolicy: {
    readonly onIndeterminate: OnIndeterminate;
    readonly onRepeat: {
      readonly default: RepeatPolicy;
      readonly tools: Readonly<Record<string, RepeatPolicy>>;
    };
  };
  readonly maxSteps: number;
  readonly tokenBudget: number | null;
  readonly stream: boolean;
  readonly modelTimeoutMs: number;
  readonly modelOutageRetries: number;
}

export const DEFAULT_MAX_STEPS = 20;
export const DEFAULT_MODEL_TIMEOUT_MS = 120_000;
export const DEFAULT_MODEL_OUTAGE_RETRIES = 8;

/** An agent's repeat policy, as code and `oncely.yaml` give it: one policy, or `{ default, tools }`. */
export const repeatPoliciesSchema = z.union([
  z.enum(REPEAT_POLICIES),
  z.strictObject({
    default: z.enum(REPEAT_POLICIES).optional(),
    tools: z.record(z.string(), z.enum(REPEAT_POLICIES)).optional(),
  }),
]);

const agentSchema = z.object({
  name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'use 1-64 characters of A-Z a-z 0-9 _ . -'),
  instructions: z.string(),
  model: z.unknown().superRefine((m, ctx) => {
    const problem = modelProblem(m);
    if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
  }),
  tools: z.array(z.custom<Tool>(isTool, 'must be a tool made by defineTool')),
  toolPolicy: z
    .object({
      onIndeterminate: z.enum(ON_INDETERMINATE).optional(),
      onRepeat: repeatPoliciesSchema.optional(),
    })
    .optional(),
  maxSteps: z.number().int().min(1).max(1000).optional(),
  tokenBudget: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).optional(),
  stream: z.boolean().optional(),
  modelTimeoutMs: z.number().int().min(1).max(3_600_000).optional(),
  modelOutageRetries: z.number().int().min(0).max(1000).optional(),
});

/**
 * Defines an agent: instructions, a model, tools, and what to do with an unknown call.
 *
 * @example
 * const billing = defineAgent({ name: 'billing-assistant', instructions: 'Help with billing.',
 *   model: openai('gpt-4o-mini'), tools: [issueCredit], toolPolicy: { onIndeterminate: 'pause' } });
 */
export function defineAgent(definition: AgentDefinition): Agent {
  const parsed = agentSchema.safeParse(definition);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.') || 'definition'}: ${i.message}`);
    throw new OncelyError('AGENT_DEFINITION_INVALID', `agent is not valid: ${problems.join('; ')}`);
  }
  const names = definition.tools.map((t) => t.name);
  const repeated = names.filter((n, i) => names.indexOf(n) !== i);
  if (repeated.length > 0) {
    throw new OncelyError(
      'AGENT_DEFINITION_INVALID',
      `agent "${definition.name}" lists tool "${repeated[0]}" twice`,
    );
  }
  const onRepeat = definition.toolPolicy?.onRepeat;
  const policies: RepeatPolicies = typeof onRepeat === 'string' ? { default: onRepeat } : (onRepeat ?? {});
  const unknownTool = Object.keys(policies.tools ?? {}).find((n) => !names.includes(n));
  if (unknownTool !== undefined) {
    throw new OncelyError(
      'AGENT_DEFINITION_INVALID',
      `agent "${definition.name}": toolPolicy.onRepeat.tools names "${unknownTool}", which is not one of its tools (${names.join(', ') || 'none'})`,
    );
  }
  return Object.freeze({
    name: definition.name,
    instructions: definition.instructions,
    model: definition.model,
    tools: Object.freeze([...definition.tools]),
    toolPolicy: Object.freeze({
      onIndeterminate: definition.toolPolicy?.onIndeterminate ?? 'fail',
      onRepeat: Object.freeze({
        default: policies.default ?? DEFAULT_REPEAT_POLICY,
        tools: Object.freeze({ ...policies.tools }),
      }),
    }),
    maxSteps: definition.maxSteps ?? DEFAULT_MAX_STEPS,
    tokenBudget: definition.tokenBudget ?? null,
    stream: definition.stream ?? false,
    modelTimeoutMs: definition.modelTimeoutMs ?? DEFAULT_MODEL_TIMEOUT_MS,
    modelOutageRetries: definition.modelOutageRetries ?? DEFAULT_MODEL_OUTAGE_RETRIES,
  });
}

/**
 * The repeat policy of a call of `tool` under `agent`: the agent's policy for that tool, else the
 * tool's own `onRepeat`, else the agent's default. A read is never a repeat.
 */
export function repeatPolicyOf(policy: Agent['toolPolicy']['onRepeat'], tool: Tool): RepeatPolicy {
  if (tool.effect.kind === 'read') return 'allow';
  return policy.tools[tool.name] ?? tool.onRepeat ?? policy.default;
}
