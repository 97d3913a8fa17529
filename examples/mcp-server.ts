// An MCP server that honours oncely's idempotency key (one line), and a client whose unknown calls
// its lookup settles.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { executeToolCall, openLedger } from 'oncely';
import { mcpTools } from 'oncely/mcp';
import { onceOnly } from 'oncely/mcp-server';

// The server: every tool registered after onceOnly is guarded by the key in the request's _meta.
const credits: string[] = [];
const server = onceOnly(new McpServer({ name: 'billing', version: '1.0.0' }), {
  store: 'sqlite:.oncely/billing-keys.db', // or postgres://…, shared by every server process
});
server.registerTool(
  'issue_credit',
  {
    description: "Credit a customer's account",
    inputSchema: { accountId: z.string(), amountCents: z.number().int().positive() },
    annotations: { readOnlyHint: false, destructiveHint: false },
  },
  ({ accountId }) => {
    credits.push(accountId); // the effect: no key bookkeeping of its own
    return {
      content: [{ type: 'text', text: 'credited' }],
      structuredContent: { receipt: `cr_${credits.length}` },
    };
  },
);
const [clientSide, serverSide] = InMemoryTransport.createLinkedPair(); // stdio or streamable HTTP alike
await server.connect(serverSide);
const client = new Client({ name: 'support-bot', version: '1.0.0' });
await client.connect(clientSide);

// The client: prefix `billing` names the tool billing_issue_credit; the server's lookup is its reconcile hook.
const tools = await mcpTools(client, { prefix: 'billing', reconcile: { issue_credit: 'server' } });
const ledger = await openLedger('sqlite:.oncely/mcp-server.db');
const call = { tenantId: 'acme', runId: `run_${Date.now()}`, toolCallId: 'call_1' };
const args = { accountId: 'acct_7', amountCents: 2500 };
const first = await executeToolCall(ledger, tools[0]!, args, call);

// The same request again, as after a lost answer: the stored result, not a second credit.
const key = `${call.runId}:${call.toolCallId}`;
const again = await client.callTool({
  name: 'issue_credit',
  arguments: args,
  _meta: { 'oncely/idempotencyKey': key },
});
const status = await client.callTool({ name: 'oncely_key_status', arguments: { key } });
console.log(
  tools.map((t) => t.name).join(','),
  first.status,
  again._meta?.['oncely/replayed'],
  (status.structuredContent as { status: string }).status,
  credits.length,
);
// → billing_issue_credit completed true completed 1
await ledger.close();
await client.close();
