import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isOncelyError } from '../errors/index.js';
import { defineTool, isTool, parseToolArgs, DEFAULT_TIMEOUT_MS, type ToolDefinition } from './define-tool.js';
import { external, read, write } from './effects.js';

const input = z.object({
  accountId: z.string().describe('the account'),
  amountCents: z.number().int().positive(),
});

type AnyDefinition = ToolDefinition<z.ZodType, unknown>;

function definition(overrides: Record<string, unknown> = {}): AnyDefinition {
  return {
    name: 'issue_credit',
    description: "Credit a customer's account",
    input,
    effect: external(),
    execute: (_args: unknown, ctx: { idempotencyKey: string }) => ({ receipt: ctx.idempotencyKey }),
    ...overrides,
  };
}

function refusal(overrides: Record<string, unknown>): string {
  try {
    defineTool(definition(overrides));
  } catch (error) {
    expect(isOncelyError(error, 'TOOL_DEFINITION_INVALID')).toBe(true);
    return (error as Error).message;
  }
  throw new Error('expected defineTool to refuse the definition');
}

describe('defineTool', () => {
  it('makes a frozen tool with defaults', () => {
    const tool = defineTool(definition());
    expect(isTool(tool)).toBe(true);
    expect(Object.isFrozen(tool)).toBe(true);
    expect(tool).toMatchObject({
      name: 'issue_credit',
      timeoutMs: DEFAULT_TIMEOUT_MS,
      downstreamAcceptsKey: true,
    });
    expect(isTool({ ...definition() })).toBe(false);
  });

  it('takes its JSON Schema from z.toJSONSchema, with the input properties', () => {
    const tool = defineTool(definition());
    expect(tool.jsonSchema).toEqual(z.toJSONSchema(input, { io: 'input' }));
    expect(tool.jsonSchema.type).toBe('object');
    expect(Object.keys(tool.jsonSchema.properties as object).sort()).toEqual(['accountId', 'amountCents']);
    expect(tool.jsonSchema.required).toEqual(['accountId', 'amountCents']);
    expect(
      (tool.jsonSchema.properties as Record<string, { description?: string }>).accountId?.description,
    ).toBe('the account');
  });

  it.each(['issue credit', '', 'x'.repeat(65), 'crédit', 'a.b'])('refuses the name %j', (name) => {
    expect(refusal({ name })).toMatch(/name: use 1-64 characters/);
  });

  it('accepts a 64-character name of letters, digits, _ and -', () => {
    expect(defineTool(definition({ name: `A-z_0${'x'.repeat(59)}` })).name).toHaveLength(64);
  });

  it.each(['', '   '])('refuses the description %j', (description) => {
    expect(refusal({ description })).toMatch(/description: say what the tool does/);
  });

  it('refuses an input that is no schema at all', () => {
    expect(refusal({ input: { accountId: 'string' } })).toMatch(/input must be a schema for the arguments/);
    expect(refusal({ input: 'accountId: string' })).toMatch(/input must be a schema for the arguments/);
  });

  it.each([
    ['a string', z.string()],
    ['an array', z.array(z.string())],
    ['a number', z.number()],
  ])('refuses %s as the input schema', (_what, schema) => {
    expect(refusal({ input: schema })).toMatch(/input must be an object schema/);
  });

  it('refuses a hand-made effect that gives a write two attempts', () => {
    expect(refusal({ effect: { ...write(), attempts: 2 } })).toMatch(
      /effect: write tools get exactly one attempt/,
    );
    expect(
      refusal({
        effect: {
          kind: 'external',
          attempts: 2,
          approval: false,
          backoff: { baseDelayMs: 0, maxDelayMs: 0 },
        },
      }),
    ).toMatch(/exactly one attempt/);
  });

  it('refuses a missing or unknown effect, and a read with approval or four attempts', () => {
    expect(refusal({ effect: undefined })).toMatch(/effect: use read\(\), write\(\)/);
    expect(refusal({ effect: { kind: 'mutate', attempts: 1 } })).toMatch(/effect: use read\(\)/);
    expect(refusal({ effect: { ...read(), attempts: 4 } })).toMatch(/1 to 3 attempts/);
    expect(refusal({ effect: { ...read(), approval: true } })).toMatch(/needs no approval/);
  });

  it('refuses a read with a compensate hook', () => {
    expect(refusal({ effect: read(), compensate: () => undefined })).toMatch(
      /nothing to compensate; remove compensate/,
    );
  });

  it('refuses hooks that are not functions, a bad timeout and a missing execute', () => {
    expect(refusal({ reconcile: 'yes' })).toMatch(/reconcile: must be a function/);
    expect(refusal({ compensate: 1 })).toMatch(/compensate: must be a function/);
    expect(refusal({ timeoutMs: 0 })).toMatch(/timeoutMs/);
    expect(refusal({ timeoutMs: 1.5 })).toMatch(/timeoutMs/);
    expect(refusal({ execute: undefined })).toMatch(/execute: must be a function/);
  });

  it('names every problem at once', () => {
    const message = refusal({ name: 'bad name', description: '' });
    expect(message).toMatch(/name:/);
    expect(message).toMatch(/description:/);
  });
});

describe('parseToolArgs', () => {
  const tool = defineTool(definition());

  it('returns the parsed arguments', () => {
    expect(parseToolArgs(tool, { accountId: 'a', amountCents: 5 })).toEqual({
      accountId: 'a',
      amountCents: 5,
    });
  });

  it('refuses bad arguments with TOOL_ARGS_INVALID naming the field', () => {
    try {
      parseToolArgs(tool, { accountId: 'a', amountCents: -5 });
      expect.unreachable();
    } catch (error) {
      expect(isOncelyError(error, 'TOOL_ARGS_INVALID')).toBe(true);
      expect((error as Error).message).toMatch(/amountCents/);
    }
  });
});
