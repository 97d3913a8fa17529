// An MCP server's tools under the ledger: effects from annotations, the key in _meta, one credit.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { executeToolCall, openLedger } from 'oncely';
import { mcpTools } from 'oncely/mcp';

// A billing MCP server (here in-process; stdio or streamable HTTP work the same) keeping its books.
const credits = new Map<string, number>();
const server = new McpServer({ name: 'billing', version: '1.0.0' });
server.registerTool(
  'issue_credit',
  {
    description: "Credit a customer's account",
    inputSchema: { accountId: z.string(), amountCents: z.number().int().positive() },
    annotations: { readOnlyHint: false, destructiveHint: false }, // → external(): one attempt
  },
  ({ amountCents }, { _meta }) => {
    const key = String(_meta?.['oncely/idempotencyKey']); // the key oncely sends with every call
    if (!credits.has(key)) credits.set(key, amountCents);
    return {
      content: [{ type: 'text', text: 'credited' }],
      structuredContent: { receipt: `cr_${credits.size}` },
    };
  },
);
const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
await server.connect(serverSide);
const client = new Client({ name: 'support-bot', version: '1.0.0' });
await client.connect(clientSide);

const [issueCredit] = await mcpTools(client, { only: ['issue_credit'] });
const ledger = await openLedger('sqlite:.oncely/mcp-tools.db');
const call = { tenantId: 'acme', runId: `run_${Date.now()}`, toolCallId: 'call_1' };
const args = { accountId: 'acct_7', amountCents: 2500 };
const first = await executeToolCall(ledger, issueCredit!, args, call);
const replay = await executeToolCall(ledger, issueCredit!, args, call); // a restart replaying the step
console.log(
  issueCredit!.effect.kind,
  first.status,
  replay.status === 'completed' ? replay.source : '-',
  credits.size,
);
// → external completed ledger 1
await ledger.close();
await client.close();
