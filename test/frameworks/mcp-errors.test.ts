import type { LanguageModelV3GenerateResult, LanguageModelV3Prompt } from '@ai-sdk/provider';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { executeToolCall, Ledger, type Tool } from '../../src/index.js';
import { durableLoop, heardOf } from '../../src/frameworks/ai-sdk/index.js';
import { mcpTools } from '../../src/frameworks/mcp/index.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';
import { driftedBilling, withoutToolCalls, type InProcessServer } from './fixtures/mcp-drifted-server.js';

/*
 * What an MCP call's errors become, by where they arose: only what provably ran nothing is "not
 * attempted"; a server that answered after running the tool (a result that breaks the output schema
 * it lists, a JSON-RPC error after the effect) never makes the ledger say the call did not take effect.
 */

const call = (runId: string, toolCallId: string) => ({ tenantId: 'acme', runId, toolCallId });

function result(content: LanguageModelV3GenerateResult['content']): LanguageModelV3GenerateResult {
  return {
    content,
    finishReason: { unified: 'stop', raw: undefined },
    usage: {
      inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
      outputTokens: { total: 1, text: 1, reasoning: undefined },
    },
    warnings: [],
  };
}

describe.each(STORE_KINDS)('MCP errors by where they arose, on %s', (kind) => {
  let opened: OpenedStore;
  let ledger: Ledger;
  let server: InProcessServer | undefined;
  let tools: Map<string, Tool>;
  const connect = async (make: () => Promise<InProcessServer>): Promise<InProcessServer> => {
    const made = await make();
    server = made;
    tools = new Map((await mcpTools(made.client, { timeoutMs: 2_000 })).map((t) => [t.name, t]));
    return made;
  };

  beforeEach(async () => {
    opened = await openTestStore(kind, 'mcp-errors');
    ledger = new Ledger(opened.store, { actorId: 'test' });
  });
  afterEach(async () => {
    await server?.close();
    server = undefined;
    await ledger.close();
    await opened.cleanup();
  });

  it('a result that breaks the listed output schema ran: applied once, recorded completed with a note', async () => {
    const billing = await connect(driftedBilling);
    const tool = tools.get('issue_credit')!;
    const args = { accountId: 'acct_7', amountCents: 2500 };
    const outcome = await executeToolCall(ledger, tool, args, call('drift', 'credit_1'));

    expect(billing.effects).toEqual([{ tool: 'issue_credit', key: 'drift:credit_1' }]);
    const record = await opened.store.ledger.get('acme', 'drift:credit_1');
    expect(record?.status).toBe('completed');
    expect(record?.error).toBeNull();
    const recorded = record?.result as { structuredContent?: unknown; problems?: string[]; note?: string };
    expect(recorded.structuredContent).toEqual({ creditId: 'cr_1' });
    expect(recorded.problems).toEqual(['receipt: is required']);
    expect(recorded.note).toMatch(/the tool ran/i);
    // What the model hears is the recorded result, not "did not take effect".
    const heard = heardOf(outcome);
    expect(heard?.kind).toBe('result');
    expect(JSON.stringify(heard)).not.toMatch(/did not take effect|not_attempted/);

    // The same key again is the recorded result: no second credit.
    const replay = await executeToolCall(ledger, tool, args, call('drift', 'credit_1'));
    expect(replay.status === 'completed' && replay.source).toBe('ledger');
    expect(billing.effects).toHaveLength(1);
  });

  it('a tool with an output schema that answers no structured content ran: completed with a note', async () => {
    const billing = await connect(driftedBilling);
    const outcome = await executeToolCall(
      ledger,
      tools.get('send_notice')!,
      { accountId: 'acct_7' },
      call('drift', 'notice_1'),
    );
    expect(billing.effects).toHaveLength(1);
    expect(outcome.status).toBe('completed');
    expect(outcome.record.status).toBe('completed');
    const recorded = outcome.record.result as { content?: unknown; problems?: string[]; note?: string };
    expect(recorded.content).toEqual([{ type: 'text', text: 'notice sent' }]);
    expect(recorded.problems).toEqual(['(result): no structured content']);
  });

  it('a result that matches its listed output schema is recorded as its structured content', async () => {
    await connect(driftedBilling);
    const outcome = await executeToolCall(
      ledger,
      tools.get('find_credit')!,
      { key: 'drift:credit_1' },
      call('drift', 'find_1'),
    );
    expect(outcome.record.status).toBe('completed');
    expect(outcome.record.result).toEqual({ receipt: 'cr_1' });
  });

  it('a JSON-RPC -32602 answered after the server ran the tool is unknown, never "not attempted"', async () => {
    const billing = await connect(driftedBilling);
    const outcome = await executeToolCall(
      ledger,
      tools.get('charge_card')!,
      { amountCents: 100 },
      call('drift', 'charge_1'),
    );
    expect(billing.effects).toHaveLength(1);
    expect(outcome.status).toBe('unknown');
    expect(outcome.record.status).toBe('indeterminate');
    expect(outcome.record.error?.code).not.toBe('TOOL_NOT_ATTEMPTED');
    expect(outcome.record.error?.message).toContain('Invalid structured content for tool charge_card');
  });

  it('the model hears the drifted result with its note, and the credit is applied once', async () => {
    const billing = await connect(driftedBilling);
    let asked = 0;
    const model = new MockLanguageModelV3({
      doGenerate: () => {
        asked += 1;
        return Promise.resolve(
          asked === 1
            ? result([
                {
                  type: 'tool-call',
                  toolCallId: 'p1',
                  toolName: 'issue_credit',
                  input: JSON.stringify({ accountId: 'acct_3', amountCents: 700 }),
                },
              ])
            : result([{ type: 'text', text: 'Credited.' }]),
        );
      },
    });
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'drift-loop' });
    const text = await loop.run(async () => {
      const r = await generateText({
        model: loop.model(model),
        tools: loop.tools([tools.get('issue_credit')!]),
        stopWhen: stepCountIs(4),
        prompt: 'credit acct_3',
      });
      return r.text;
    });
    expect(text).toBe('Credited.');
    expect(billing.effects).toHaveLength(1);
    const toolResults = (prompt: LanguageModelV3Prompt | undefined) =>
      prompt
        ?.flatMap((m) => (m.role === 'tool' ? m.content : []))
        .flatMap((p) => (p.type === 'tool-result' ? [p.output] : []));
    const output = toolResults(model.doGenerateCalls[1]?.prompt)?.[0] as
      { type: string; value: { structuredContent?: unknown; note?: string } } | undefined;
    expect(output?.type).toBe('json');
    expect(output?.value.structuredContent).toEqual({ creditId: 'cr_1' });
    expect(output?.value.note).toMatch(/the tool ran/i);
    expect(JSON.stringify(output)).not.toMatch(/did not take effect|not_attempted/);
  });

  it('a server that answers -32601 (no tools/call at all) ran nothing: failed, not attempted', async () => {
    const lister = await connect(withoutToolCalls);
    const outcome = await executeToolCall(
      ledger,
      tools.get('issue_credit')!,
      { accountId: 'acct_7', amountCents: 2500 },
      call('lister', 'credit_1'),
    );
    expect(lister.effects).toHaveLength(0);
    expect(outcome.status).toBe('failed');
    expect(outcome.record.error?.code).toBe('TOOL_NOT_ATTEMPTED');
    expect(outcome.record.error?.message).toMatch(/refused the call before running it/);
  });

  it('a client that is no longer connected sends nothing: failed, not attempted', async () => {
    const billing = await connect(driftedBilling);
    await billing.client.close();
    const outcome = await executeToolCall(
      ledger,
      tools.get('issue_credit')!,
      { accountId: 'acct_7', amountCents: 2500 },
      call('closed', 'credit_1'),
    );
    expect(billing.effects).toHaveLength(0);
    expect(outcome.status).toBe('failed');
    expect(outcome.record.error?.code).toBe('TOOL_NOT_ATTEMPTED');
    expect(outcome.record.error?.message).toMatch(/not connected/);
  });
});
