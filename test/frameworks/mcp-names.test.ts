import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isOncelyError } from '../../src/index.js';
import { mcpTools } from '../../src/frameworks/mcp/index.js';

/*
 * The names an MCP server's tools get as oncely tools: the prefix joined with `_` (docs/frameworks.md),
 * every name valid for every major provider (`^[a-zA-Z0-9_-]{1,64}$`), a collision or a name that
 * cannot be made valid refused with the tool named, never two tools under one name.
 */

const PROVIDER_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
let open: { close(): Promise<void> } | undefined;

async function serverWith(names: readonly string[]): Promise<Client> {
  const server = new McpServer({ name: 'billing', version: '1.0.0' });
  for (const name of names) {
    server.registerTool(
      name,
      { description: `the tool ${name}`, inputSchema: { accountId: z.string() } },
      () => ({ content: [{ type: 'text', text: 'ok' }] }),
    );
  }
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'names-test', version: '1.0.0' });
  await client.connect(clientSide);
  open = client;
  return client;
}

const refusal = (work: Promise<unknown>): Promise<unknown> =>
  work.then(
    () => undefined,
    (error: unknown) => error,
  );

afterEach(async () => {
  await open?.close();
  open = undefined;
});

describe('MCP tool names', () => {
  it('joins a prefix with _, as documented: prefix billing gives billing_issue_credit', async () => {
    const client = await serverWith(['issue_credit', 'find_credit']);
    const names = (await mcpTools(client, { prefix: 'billing' })).map((t) => t.name).sort();
    expect(names).toEqual(['billing_find_credit', 'billing_issue_credit']);
  });

  it('takes a prefix given with its trailing _ (or -) without doubling it; no prefix leaves the names', async () => {
    const client = await serverWith(['issue_credit']);
    expect((await mcpTools(client, { prefix: 'billing_' })).map((t) => t.name)).toEqual([
      'billing_issue_credit',
    ]);
    expect((await mcpTools(client, { prefix: 'billing-' })).map((t) => t.name)).toEqual([
      'billing-issue_credit',
    ]);
    expect((await mcpTools(client, { prefix: '' })).map((t) => t.name)).toEqual(['issue_credit']);
    expect((await mcpTools(client)).map((t) => t.name)).toEqual(['issue_credit']);
  });

  it('makes every name valid for the providers: other characters become _', async () => {
    const client = await serverWith(['billing.refund', 'crm/find', 'notes:add']);
    const tools = await mcpTools(client, { prefix: 'acme' });
    expect(tools.map((t) => t.name).sort()).toEqual([
      'acme_billing_refund',
      'acme_crm_find',
      'acme_notes_add',
    ]);
    for (const tool of tools) expect(tool.name).toMatch(PROVIDER_NAME);
  });

  it('refuses two server tools that would share a name, naming both', async () => {
    const client = await serverWith(['billing.refund', 'billing_refund']);
    const error = await refusal(mcpTools(client, { prefix: 'acme' }));
    expect(isOncelyError(error, 'TOOL_DEFINITION_INVALID')).toBe(true);
    expect((error as Error).message).toMatch(
      /"billing\.refund" and "billing_refund" would both be named "acme_billing_refund"/,
    );
    // Leaving one out with `only` is the way through.
    const [one] = await mcpTools(client, { prefix: 'acme', only: ['billing_refund'] });
    expect(one?.name).toBe('acme_billing_refund');
  });

  it('refuses a name over 64 characters, saying how long and what to do', async () => {
    const long = `issue_credit_${'x'.repeat(45)}`; // 58 characters: fits alone, not with the prefix
    const client = await serverWith([long, 'find_credit']);
    expect((await mcpTools(client, { only: [long] }))[0]?.name).toBe(long);
    const error = await refusal(mcpTools(client, { prefix: 'billing_eu' }));
    expect(isOncelyError(error, 'TOOL_DEFINITION_INVALID')).toBe(true);
    expect((error as Error).message).toContain(`would be named "billing_eu_${long}", which is 69 characters`);
    expect((error as Error).message).toMatch(/shorter prefix|only/);
  });

  it('refuses a prefix that is not made of A-Z a-z 0-9 _ -', async () => {
    const client = await serverWith(['issue_credit']);
    const error = await refusal(mcpTools(client, { prefix: 'billing eu' }));
    expect(isOncelyError(error, 'TOOL_DEFINITION_INVALID')).toBe(true);
    expect((error as Error).message).toMatch(/prefix "billing eu"/);
  });
});
