import { type } from 'arktype';
import * as v from 'valibot';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import * as zm from 'zod/mini';
import { z as z3 } from 'zod/v3';
import { executeToolCall, openLedger, type Ledger } from '../calls/index.js';
import { isOncelyError } from '../errors/index.js';
import { defineTool, parseToolArgs, type Tool } from './define-tool.js';
import { external } from './effects.js';
import { strictJsonSchema } from './strict-schema.js';
import type { ToolInputSchema } from './tool-input.js';

/** The same arguments' schema, `{ accountId: string, amountCents: positive int, note?: string }`, made every way. */
const SCHEMAS: [string, ToolInputSchema][] = [
  [
    'zod 4 classic',
    z.object({
      accountId: z.string(),
      amountCents: z.number().int().positive(),
      note: z.string().optional(),
    }),
  ],
  [
    'zod 4 mini',
    zm.object({
      accountId: zm.string(),
      amountCents: zm.number().check(zm.int(), zm.positive()),
      note: zm.optional(zm.string()),
    }),
  ],
  [
    'zod 3',
    z3.object({
      accountId: z3.string(),
      amountCents: z3.number().int().positive(),
      note: z3.string().optional(),
    }),
  ],
  [
    'arktype (Standard JSON Schema)',
    type({ accountId: 'string', amountCents: 'number.integer > 0', 'note?': 'string' }),
  ],
  [
    'a JSON Schema object',
    {
      type: 'object',
      properties: {
        accountId: { type: 'string' },
        amountCents: { type: 'integer', exclusiveMinimum: 0 },
        note: { type: 'string' },
      },
      required: ['accountId', 'amountCents'],
      additionalProperties: false,
    },
  ],
];

function creditTool(input: ToolInputSchema, seen: unknown[], strict = false): Tool {
  return defineTool({
    name: 'issue_credit',
    description: "Credit a customer's account",
    input,
    strict,
    effect: external(),
    execute: (args, ctx) => {
      seen.push(args);
      return { receipt: `cr_${ctx.toolCallId}` };
    },
  });
}

let ledger: Ledger;
beforeAll(async () => {
  ledger = await openLedger('sqlite::memory:');
});
afterAll(async () => {
  await ledger.close();
});

describe.each(SCHEMAS)('a tool whose input is %s', (_kind, input) => {
  it('shows the model an object JSON Schema with the three arguments', () => {
    const tool = creditTool(input, []);
    expect(tool.jsonSchema.type).toBe('object');
    expect(Object.keys(tool.jsonSchema.properties as object).sort()).toEqual([
      'accountId',
      'amountCents',
      'note',
    ]);
    expect([...(tool.jsonSchema.required as string[])].sort()).toEqual(['accountId', 'amountCents']);
  });

  it('runs a call with good arguments, and refuses bad ones naming each problem, writing nothing', async () => {
    const seen: unknown[] = [];
    const tool = creditTool(input, seen);
    const done = await executeToolCall(
      ledger,
      tool,
      { accountId: 'acct_7', amountCents: 2500 },
      {
        tenantId: 'acme',
        runId: `run_${_kind.replace(/\W/g, '_')}`,
        toolCallId: 'good',
      },
    );
    expect(done.status).toBe('completed');
    expect(seen).toEqual([{ accountId: 'acct_7', amountCents: 2500 }]);

    const refused = await executeToolCall(
      ledger,
      tool,
      { amountCents: -5 },
      {
        tenantId: 'acme',
        runId: `run_${_kind.replace(/\W/g, '_')}`,
        toolCallId: 'bad',
      },
    ).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isOncelyError(refused, 'TOOL_ARGS_INVALID')).toBe(true);
    const message = (refused as Error).message;
    expect(message).toContain('accountId');
    expect(message).toContain('amountCents');
    expect(seen).toHaveLength(1);
    expect(await ledger.store.ledger.get('acme', `run_${_kind.replace(/\W/g, '_')}:bad`)).toBeUndefined();
  });

  it('in strict mode, shows a schema that keeps the strict-mode rules and takes back the nulls of unused optionals', () => {
    const seen: unknown[] = [];
    const tool = creditTool(input, seen, true);
    expect(strictModeProblems(tool.jsonSchema)).toEqual([]);
    expect(parseToolArgs(tool, { accountId: 'acct_7', amountCents: 100, note: null })).toEqual({
      accountId: 'acct_7',
      amountCents: 100,
    });
    expect(parseToolArgs(tool, { accountId: 'acct_7', amountCents: 100, note: 'late' })).toEqual({
      accountId: 'acct_7',
      amountCents: 100,
      note: 'late',
    });
  });
});

describe('input schemas oncely cannot use', () => {
  const refusal = (input: unknown): string => {
    try {
      creditTool(input as ToolInputSchema, []);
      return 'accepted';
    } catch (error) {
      return (error as Error).message;
    }
  };

  it('refuses a Standard Schema that cannot say its JSON Schema (valibot), naming the library', () => {
    expect(refusal(v.object({ accountId: v.string() }))).toMatch(
      /Standard Schema \(valibot\) that cannot say its JSON Schema/,
    );
  });

  it('refuses a JSON Schema that is not one', () => {
    expect(refusal({ type: 'object', properties: { a: { type: 'strin' } } })).toMatch(
      /not a valid JSON Schema/,
    );
  });

  it('refuses strict mode for a map of arbitrary keys, naming where', () => {
    expect(() =>
      strictJsonSchema({
        type: 'object',
        properties: { tags: { type: 'object', additionalProperties: { type: 'string' } } },
      }),
    ).toThrow(/\(arguments\)\.tags: strict mode cannot describe an object of arbitrary keys/);
  });

  it('refuses a schema that validates asynchronously when a call is checked', () => {
    const asyncSchema = {
      '~standard': {
        version: 1,
        vendor: 'acme',
        validate: (value: unknown) => Promise.resolve({ value }),
        jsonSchema: { input: () => ({ type: 'object', properties: {} }), output: () => ({}) },
      },
    };
    const tool = creditTool(asyncSchema as unknown as ToolInputSchema, []);
    expect(() => parseToolArgs(tool, {})).toThrow(/validates asynchronously/);
  });
});

/** What OpenAI's strict mode refuses in a schema: an open object, a property not required, a map. */
function strictModeProblems(schema: unknown, at = '$'): string[] {
  if (typeof schema !== 'object' || schema === null) return [];
  const node = schema as Record<string, unknown>;
  const problems: string[] = [];
  if (
    node.type === 'object' ||
    (Array.isArray(node.type) && node.type.includes('object')) ||
    'properties' in node
  ) {
    const properties = (node.properties ?? {}) as Record<string, unknown>;
    if (node.additionalProperties !== false) problems.push(`${at}: additionalProperties is not false`);
    const required = new Set((node.required ?? []) as string[]);
    for (const key of Object.keys(properties)) {
      if (!required.has(key)) problems.push(`${at}.${key}: not required`);
      problems.push(...strictModeProblems(properties[key], `${at}.${key}`));
    }
  }
  if (node.items !== undefined) problems.push(...strictModeProblems(node.items, `${at}[]`));
  for (const c of ['anyOf', 'oneOf', 'allOf']) {
    if (Array.isArray(node[c]))
      (node[c] as unknown[]).forEach((o, i) => problems.push(...strictModeProblems(o, `${at}.${c}[${i}]`)));
  }
  return problems;
}
