import { z } from 'zod/v4';
import { OncelyError } from '../errors/index.js';
import {
  REPEAT_POLICIES,
  repeatDigest,
  toJsonValue,
  type JsonValue,
  type RepeatPolicy,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import { definitionError, effectProblem, type Effect } from './effects.js';
import { fromStrictArgs, strictJsonSchema } from './strict-schema.js';
import { toolInputOf, type InputOf, type ToolInput, type ToolInputSchema } from './tool-input.js';

/** What every execution of a tool receives (DESIGN §2). */
export interface ToolContext {
  /** `<run_id>:<tool_call_id>`: pass it to the system you change, so it can recognise a repeat. */
  readonly idempotencyKey: string;
  readonly runId: string;
  readonly toolCallId: string;
  readonly tenantId: string;
  /** The ledger attempt: 1, then +1 each time a `failed` call is reserved again (same key). */
  readonly attempt: number;
  /** The try within this attempt: 0, then 1 and 2 for a read that is retried. */
  readonly retry: number;
  /** Aborted on timeout or when the caller gives up: stop sending, and throw. */
  readonly signal: AbortSignal;
  /**
   * The lease epoch of the run's driver making this call (a run driven by `oncely worker`,
   * `runtime.run`): it grows each time another process takes the run over. Send it along, and a
   * downstream that keeps the highest token seen per run can refuse a request that carries a lower
   * one — a frozen process's late request after its run was taken over (docs/operations.md).
   * Undefined for a call outside a run's lease (`executeToolCall`, oncely/ai-sdk, a reconcile hook).
   */
  readonly fencingToken?: number;
}

/** What a reconcile hook found when it looked the key up downstream. It must only read. */
export type ReconcileOutcome =
  | { readonly status: 'completed'; readonly value: unknown; readonly resultReference?: string | null }
  | { readonly status: 'failed'; readonly reason?: string }
  | { readonly status: 'unknown'; readonly reason?: string };

export type ReconcileHook = (
  record: ToolExecutionRecord,
  context: ToolContext,
) => ReconcileOutcome | Promise<ReconcileOutcome>;

/** Undoes a completed call; itself a once-only side effect, keyed `<key>:compensation`. */
export type CompensateHook = (record: ToolExecutionRecord, context: ToolContext) => unknown;

export interface ToolDefinition<Input extends ToolInputSchema, Output> {
  /** 1-64 of `A-Z a-z 0-9 _ -`, the name the model calls it by. */
  readonly name: string;
  readonly description: string;
  /**
   * The arguments' schema; the model sees its JSON Schema. A zod object schema (zod 4 classic or
   * mini, or zod 3), any Standard Schema library that can say its JSON Schema (Standard JSON Schema),
   * or a JSON Schema object (`{ type: 'object', properties: { ... } }`, as MCP servers give them).
   */
  readonly input: Input;
  /**
   * Show the model the schema in OpenAI's strict mode: every object closed and every property
   * required, a property that may be left out made nullable instead. The nulls a strict model sends
   * for unused optional arguments are taken out before the arguments are checked. Default false.
   */
  readonly strict?: boolean;
  readonly effect: Effect;
  /** Milliseconds per try before the signal is aborted; default 30000. */
  readonly timeoutMs?: number;
  /**
   * At most this many calls of the tool run at once across every process sharing the store (a
   * billing API that takes N requests at a time). A call waits for a free slot before it is
   * reserved: while it waits nothing is sent and nothing is unknown. Default: no limit.
   */
  readonly concurrency?: number;
  /**
   * `false` when the downstream system cannot take an idempotency key; then a reconcile hook is what
   * settles an unknown call, and `assertToolContract` requires one.
   */
  readonly downstreamAcceptsKey?: boolean;
  /**
   * The system the tool changes (`'billing'`, `'partner-payments'`): the console's incident view
   * groups unknown calls by tool and downstream, so calls an outage left unknown are found together.
   */
  readonly downstream?: string;
  readonly reconcile?: ReconcileHook;
  readonly compensate?: CompensateHook;
  /**
   * Picks the downstream reference (a receipt id) out of a result, for the ledger. Declared as a
   * method, like `execute`, so a tool with a typed result is still assignable to `Tool`.
   */
  resultReference?(value: Output): string | null | undefined;
  /**
   * What makes two calls of this tool the same effect, for catching the model's repeats: by default
   * every argument (canonical JSON). Name the fields that matter (`({ accountId, orderId }) =>
   * [accountId, orderId]`) and a repeat with a reworded memo or another amount is caught too.
   * Not for a read.
   */
  repeatKey?(args: InputOf<Input>): unknown;
  /**
   * What happens when the model makes a call that repeats an earlier one of its scope that took
   * effect or may have: `ask` an operator first, `refuse` it, or `allow` it as any call. Default: the
   * agent's `toolPolicy.onRepeat`, else `ask`. Not for a read (a read is never a repeat).
   */
  readonly onRepeat?: RepeatPolicy;
  /**
   * Look for an earlier identical call across the whole tenant within this many milliseconds, not
   * only in the call's run (or conversation): a refund a customer asks for in two chats. Not for a read.
   */
  readonly repeatWindowMs?: number;
  execute(args: InputOf<Input>, context: ToolContext): Output | Promise<Output>;
}

const TOOL = Symbol.for('oncely.tool');
export const DEFAULT_TIMEOUT_MS = 30_000;

/** A validated tool: its definition, frozen, with the JSON Schema the model sees. */
export interface Tool<Input extends ToolInputSchema = ToolInputSchema, Output = unknown> extends Readonly<
  ToolDefinition<Input, Output>
> {
  readonly timeoutMs: number;
  readonly downstreamAcceptsKey: boolean;
  readonly strict: boolean;
  /** The JSON Schema the model is shown (its strict-mode form when `strict`). */
  readonly jsonSchema: Record<string, unknown>;
  /** The input schema made usable: its own JSON Schema and the check of a call's arguments. */
  readonly inputSchema: ToolInput;
  readonly [TOOL]: true;
}

const fn = (message: string) =>
  z.custom<(...args: never[]) => unknown>((v) => typeof v === 'function', message);

const definitionSchema = z.object({
  name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'use 1-64 characters of A-Z a-z 0-9 _ -'),
  description: z
    .string()
    .trim()
    .min(1, 'say what the tool does; the model reads it to decide when to call it'),
  input: z.unknown(),
  strict: z.boolean().optional(),
  effect: z.unknown().superRefine((effect, ctx) => {
    const problem = effectProblem(effect);
    if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
  }),
  timeoutMs: z.number().int().min(1).max(86_400_000).optional(),
  concurrency: z.number().int().min(1).max(10_000).optional(),
  downstreamAcceptsKey: z.boolean().optional(),
  downstream: z
    .string()
    .regex(/^[A-Za-z0-9_.:/-]{1,64}$/, 'use 1-64 characters of A-Z a-z 0-9 _ . : / -')
    .optional(),
  reconcile: fn('must be a function (record, context) => outcome').optional(),
  compensate: fn('must be a function (record, context) => result').optional(),
  resultReference: fn('must be a function (result) => string').optional(),
  repeatKey: fn('must be a function (args) => the identity of the effect').optional(),
  onRepeat: z.enum(REPEAT_POLICIES).optional(),
  repeatWindowMs: z
    .number()
    .int()
    .min(1)
    .max(31 * 86_400_000)
    .optional(),
  execute: fn('must be a function (args, context) => result'),
});

/**
 * Defines a tool with a declared side effect. Bad definitions throw `TOOL_DEFINITION_INVALID` naming
 * every field to change.
 *
 * @example
 * const issueCredit = defineTool({
 *   name: 'issue_credit',
 *   description: "Credit a customer's account",
 *   input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
 *   effect: external(),
 *   execute: (args, ctx) => billing.credit(args, { idempotencyKey: ctx.idempotencyKey }),
 * });
 */
export function defineTool<Input extends ToolInputSchema, Output>(
  definition: ToolDefinition<Input, Output>,
): Tool<Input, Output> {
  const parsed = definitionSchema.safeParse(definition);
  const name =
    typeof (definition as { name?: unknown } | null)?.name === 'string' ? definition.name : '(unnamed)';
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.') || 'definition'}: ${i.message}`);
    throw definitionError(`tool "${name}" is not valid: ${problems.join('; ')}`);
  }
  if (
    definition.effect.kind === 'read' &&
    (definition.repeatKey !== undefined ||
      definition.onRepeat !== undefined ||
      definition.repeatWindowMs !== undefined)
  ) {
    throw definitionError(
      `tool "${name}" is a read: it changes nothing, so a second call is never a repeat; remove repeatKey, onRepeat and repeatWindowMs`,
    );
  }
  if (definition.effect.kind === 'read' && definition.compensate !== undefined) {
    throw definitionError(
      `tool "${name}" is a read: it changes nothing, so there is nothing to compensate; remove compensate`,
    );
  }
  const inputSchema = inputOf(name, definition.input);
  const strict = definition.strict ?? false;
  return Object.freeze({
    ...definition,
    timeoutMs: definition.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    downstreamAcceptsKey: definition.downstreamAcceptsKey ?? true,
    strict,
    jsonSchema: strict ? strictSchemaOf(name, inputSchema.jsonSchema) : inputSchema.jsonSchema,
    inputSchema,
    [TOOL]: true as const,
  });
}

function inputOf(name: string, input: unknown): ToolInput {
  let made: ToolInput;
  try {
    made = toolInputOf(input);
  } catch (cause) {
    throw new OncelyError(
      'TOOL_DEFINITION_INVALID',
      `tool "${name}": input ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause },
    );
  }
  if (made.jsonSchema.type !== 'object') {
    throw definitionError(
      `tool "${name}": input must be an object schema (z.object({ ... }) or { type: 'object', ... }), because models pass named arguments`,
    );
  }
  return made;
}

function strictSchemaOf(name: string, schema: Record<string, unknown>): Record<string, unknown> {
  try {
    return strictJsonSchema(schema);
  } catch (cause) {
    throw definitionError(
      `tool "${name}": strict: true, but ${cause instanceof Error ? cause.message : String(cause)}`,
    );
  }
}

export function isTool(value: unknown): value is Tool {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[TOOL] === true;
}

export function assertTool(value: unknown): asserts value is Tool {
  if (!isTool(value)) throw definitionError('expected a tool made by defineTool({ ... })');
}

/** Validates a call's arguments against the tool's schema; nothing is written when they are wrong. */
export function parseToolArgs<Input extends ToolInputSchema>(
  tool: Tool<Input>,
  args: unknown,
): InputOf<Input> {
  const given = tool.strict ? fromStrictArgs(args, tool.inputSchema.jsonSchema) : args;
  const parsed = tool.inputSchema.check(given);
  if (parsed.ok) return parsed.value as InputOf<Input>;
  const { problems } = parsed;
  throw new OncelyError(
    'TOOL_ARGS_INVALID',
    `arguments for tool "${tool.name}" are not valid: ${problems.join('; ')}`,
    {
      details: { tool: tool.name, issues: problems },
    },
  );
}

/**
 * The repeat digest of a call of `tool` (its tool and the identity of its arguments, see
 * `repeatKey`; `digestOfArgs` is the call's `argsDigest`); null for a read, which is never a repeat. A `repeatKey` that throws or gives what
 * JSON cannot hold is the tool's bug: `TOOL_DEFINITION_INVALID`.
 */
export function repeatDigestOf(tool: Tool, args: unknown, digestOfArgs: string): string | null {
  if (tool.effect.kind === 'read') return null;
  // Without a repeatKey the identity is every argument: their digest, already made, stands for them.
  if (tool.repeatKey === undefined) return repeatDigest(tool.name, digestOfArgs);
  let identity: JsonValue;
  try {
    identity = toJsonValue(tool.repeatKey(args));
  } catch (cause) {
    throw new OncelyError(
      'TOOL_DEFINITION_INVALID',
      `tool "${tool.name}": repeatKey failed on these arguments (${cause instanceof Error ? cause.message : String(cause)}); it must return a JSON value`,
      { cause },
    );
  }
  return repeatDigest(tool.name, identity);
}
