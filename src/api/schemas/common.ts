import { z } from 'zod/v4';

/** Run ids and tool call ids: 1-128 of `A-Z a-z 0-9 _ . -` (the ledger's own rule). */
const ID = '[A-Za-z0-9_.-]{1,128}';

export const runIdSchema = z
  .string()
  .regex(new RegExp(`^${ID}$`), 'use 1-128 characters of A-Z a-z 0-9 _ . -')
  .describe('A run id');

/** `<run_id>:<tool_call_id>`, or `<run_id>:<tool_call_id>:compensation` for a compensation record. */
export const executionKeySchema = z
  .string()
  .regex(new RegExp(`^${ID}:${ID}(:compensation)?$`), 'expected <run_id>:<tool_call_id>')
  .describe('The idempotency key of a tool call: <run_id>:<tool_call_id>');

/** An approval is asked for one call, so it is named by that call's key. */
export const approvalKeySchema = z
  .string()
  .regex(new RegExp(`^${ID}:${ID}$`), 'expected <run_id>:<tool_call_id>')
  .describe('The idempotency key of the call waiting for approval: <run_id>:<tool_call_id>');

export const actorIdSchema = z
  .string()
  .regex(new RegExp(`^${ID}$`), 'use 1-128 characters of A-Z a-z 0-9 _ . -');

/** A reason an operator gives: required, trimmed, at most 2000 characters (the ledger's rule). */
export const reasonSchema = z
  .string()
  .trim()
  .min(1, 'a reason is required: say what you checked and what you found')
  .max(2000, 'a reason is at most 2000 characters');

export const limitSchema = z.coerce
  .number()
  .int()
  .min(1)
  .max(500)
  .default(50)
  .describe('Items per page, 1-500; default 50');

export const cursorSchema = z.string().max(1024).optional().describe('The next_cursor of the previous page');

export const errorEnvelopeSchema = z
  .object({
    error: z.object({
      code: z.string().describe('A stable code, listed in docs/errors.md'),
      message: z.string().describe('What happened and what to do'),
    }),
    record: z.unknown().optional().describe('With LEDGER_ALREADY_SETTLED: the record as it stands'),
    approval: z
      .unknown()
      .optional()
      .describe('With APPROVAL_ALREADY_DECIDED: the approval as it stands (without earlier)'),
  })
  .meta({ id: 'Error' });

/** The answers every authenticated route may give besides its own. */
export const authErrors = {
  400: errorEnvelopeSchema,
  401: errorEnvelopeSchema,
  403: errorEnvelopeSchema,
  404: errorEnvelopeSchema,
  413: errorEnvelopeSchema,
  415: errorEnvelopeSchema,
  500: errorEnvelopeSchema,
} as const;

export const errorInfoSchema = z.object({ code: z.string(), message: z.string() });

/** Any JSON value (as stored in the ledger or a run). */
export const anyJsonSchema = z.unknown().describe('Any JSON value');

export function page<T extends z.ZodType>(item: T) {
  return z.object({
    items: z.array(item),
    next_cursor: z.string().nullable().describe('Pass as ?cursor= for the next page; null on the last one'),
  });
}
