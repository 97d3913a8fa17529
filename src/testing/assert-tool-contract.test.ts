import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ToolContractError, ToolNotAttemptedError } from '../errors/index.js';
import { defineTool, external, read, write, type Tool } from '../tools/index.js';
import { assertToolContract } from './assert-tool-contract.js';

const input = z.object({ accountId: z.string() });

function credit(overrides: Partial<Parameters<typeof defineTool>[0]> = {}): Tool {
  return defineTool({
    name: 'issue_credit',
    description: 'Credit an account',
    input,
    effect: external(),
    execute: (_args, ctx) => ({ receipt: ctx.idempotencyKey }),
    ...overrides,
  });
}

async function problemsOf(tool: unknown, args?: unknown): Promise<readonly string[]> {
  try {
    await assertToolContract(tool, args === undefined ? {} : { args });
  } catch (error) {
    expect(error).toBeInstanceOf(ToolContractError);
    return (error as ToolContractError).problems;
  }
  return [];
}

describe('assertToolContract', () => {
  it('passes a side-effecting tool that reads its key', async () => {
    const report = await assertToolContract(credit(), { args: { accountId: 'a' } });
    expect(report).toEqual({
      tool: 'issue_credit',
      effect: 'external',
      executed: true,
      readIdempotencyKey: true,
    });
  });

  it('fails a side-effecting tool that never reads its key, saying what to change', async () => {
    const problems = await problemsOf(credit({ execute: () => ({ ok: true }) }), { accountId: 'a' });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/never read context\.idempotencyKey/);
    expect(problems[0]).toMatch(/downstreamAcceptsKey: false/);
  });

  it('accepts a tool whose downstream takes no key when it has a reconcile hook', async () => {
    const tool = credit({
      execute: () => ({ ok: true }),
      downstreamAcceptsKey: false,
      reconcile: () => ({ status: 'unknown' }),
    });
    await expect(assertToolContract(tool, { args: { accountId: 'a' } })).resolves.toMatchObject({
      readIdempotencyKey: false,
    });
  });

  it('fails a keyless downstream without a reconcile hook', async () => {
    const problems = await problemsOf(credit({ downstreamAcceptsKey: false }), { accountId: 'a' });
    expect(problems.join('\n')).toMatch(/add a reconcile hook/);
  });

  it('fails a write allowed more than one attempt, even when built by hand', async () => {
    const tool = { ...credit(), effect: { ...write(), attempts: 3 } };
    const problems = await problemsOf(tool, { accountId: 'a' });
    expect(problems.join('\n')).toMatch(/exactly one attempt/);
  });

  it('requires sample args for a tool that changes something', async () => {
    expect((await problemsOf(credit())).join('\n')).toMatch(/pass args/);
  });

  it('reports sample args that do not match the schema', async () => {
    expect((await problemsOf(credit(), { accountId: 7 })).join('\n')).toMatch(/accountId/);
  });

  it('counts a refusal before sending as an execution, and still checks the key', async () => {
    const refusing = credit({
      execute: (_args, ctx) => {
        void ctx.idempotencyKey;
        throw new ToolNotAttemptedError('token expired');
      },
    });
    await expect(assertToolContract(refusing, { args: { accountId: 'a' } })).resolves.toMatchObject({
      readIdempotencyKey: true,
    });
  });

  it('reports a sample execution that throws', async () => {
    const broken = credit({
      execute: () => {
        throw new Error('downstream down');
      },
    });
    expect((await problemsOf(broken, { accountId: 'a' })).join('\n')).toMatch(/downstream down/);
  });

  it('lets a read pass without reading the key or running it', async () => {
    const lookup = defineTool({
      name: 'lookup',
      description: 'Look up an order',
      input,
      effect: read(),
      execute: () => ({ found: true }),
    });
    await expect(assertToolContract(lookup)).resolves.toMatchObject({ executed: false });
  });

  it('refuses something that is not a tool', async () => {
    expect(await problemsOf({ name: 'x' })).toEqual([
      'it is not an oncely tool; define it with defineTool({ ... })',
    ]);
  });
});
