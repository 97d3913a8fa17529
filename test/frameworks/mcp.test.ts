import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LanguageModelV3GenerateResult } from '@ai-sdk/provider';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executeToolCall, Ledger, isOncelyError, type Tool } from '../../src/index.js';
import { durableLoop } from '../../src/frameworks/ai-sdk/index.js';
import { mcpTools } from '../../src/frameworks/mcp/index.js';
import { openTestStore, type OpenedStore } from '../support/stores.js';
import { connectBilling, type Connected, type McpTransportKind } from './mcp-support.js';

interface Entry {
  tool: string;
  key: string | null;
  amountCents?: number;
}

describe.each<McpTransportKind>(['stdio', 'http'])('MCP tools over %s, guarded', (transport) => {
  let dir: string;
  let books: string;
  let connected: Connected;
  let opened: OpenedStore;
  let ledger: Ledger;
  let tools: Map<string, Tool>;
  const entries = (): Entry[] =>
    existsSync(books)
      ? readFileSync(books, 'utf8')
          .split('\n')
          .filter(Boolean)
          .map((l) => JSON.parse(l) as Entry)
      : [];
  const call = (toolCallId: string) => ({ tenantId: 'acme', runId: `mcp-${transport}`, toolCallId });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'oncely-mcp-'));
    books = join(dir, 'books.jsonl');
    connected = await connectBilling(transport, { BOOKS: books });
    opened = await openTestStore('sqlite', 'mcp');
    ledger = new Ledger(opened.store, { actorId: 'test' });
    tools = new Map((await mcpTools(connected.client, { timeoutMs: 2_000 })).map((t) => [t.name, t]));
  }, 60_000);
  afterAll(async () => {
    await ledger?.close();
    await opened?.cleanup();
    await connected?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('takes each tool with the effect its annotations declare and its JSON Schema as it is', () => {
    expect([...tools.keys()].sort()).toEqual(['charge_card', 'close_account', 'find_credit', 'issue_credit']);
    expect(tools.get('find_credit')?.effect.kind).toBe('read');
    expect(tools.get('issue_credit')?.effect.kind).toBe('external');
    expect(tools.get('close_account')?.effect.kind).toBe('destructive'); // unannotated
    expect(tools.get('issue_credit')?.inputSchema.kind).toBe('json-schema');
    // The key argument is oncely's to fill: the model is never asked for it.
    expect(Object.keys(tools.get('close_account')!.jsonSchema.properties as object)).toEqual(['accountId']);
  });

  it('sends the key in _meta, runs a call once, and replays it without a second credit', async () => {
    const tool = tools.get('issue_credit')!;
    const args = { accountId: 'acct_7', amountCents: 2500 };
    const first = await executeToolCall(ledger, tool, args, call('credit_1'));
    const replay = await executeToolCall(ledger, tool, args, call('credit_1'));
    expect(first.status).toBe('completed');
    expect(replay.status === 'completed' && replay.source).toBe('ledger');
    const value = first.status === 'completed' ? (first.value as { receipt?: string }) : undefined;
    expect(value?.receipt).toMatch(/^cr_/);
    const credits = entries().filter(
      (e) => e.tool === 'issue_credit' && e.key === `mcp-${transport}:credit_1`,
    );
    expect(credits).toHaveLength(1);
  });

  it('fills the key argument for a server that asks for it', async () => {
    const outcome = await executeToolCall(
      ledger,
      tools.get('close_account')!,
      { accountId: 'acct_9' },
      call('close_1'),
    );
    expect(outcome.status).toBe('completed');
    expect(
      entries()
        .filter((e) => e.tool === 'close_account')
        .map((e) => e.key),
    ).toEqual([`mcp-${transport}:close_1`]);
  });

  it('takes an error result at its word: failed only when the server says nothing was applied, else unknown', async () => {
    const declined = await executeToolCall(
      ledger,
      tools.get('charge_card')!,
      { amountCents: 20_000 },
      call('charge_1'),
    );
    expect(declined.status).toBe('failed');
    expect(declined.record.error?.code).toBe('TOOL_NOT_ATTEMPTED');
    const timedOut = await executeToolCall(
      ledger,
      tools.get('charge_card')!,
      { amountCents: 100 },
      call('charge_2'),
    );
    expect(timedOut.status).toBe('unknown');
    expect(timedOut.record.status).toBe('indeterminate');
    expect(timedOut.record.error?.message).toContain('the card network timed out');
  });

  it('refuses bad arguments against the server schema before anything is sent', async () => {
    const before = entries().length;
    const refused = await executeToolCall(
      ledger,
      tools.get('issue_credit')!,
      { accountId: 7 },
      call('bad_1'),
    ).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isOncelyError(refused, 'TOOL_ARGS_INVALID')).toBe(true);
    expect((refused as Error).message).toMatch(/amountCents: is required/);
    expect(entries()).toHaveLength(before);
  });

  it('catches a repeat: the same tool with the same arguments again in the run is not sent, an approval names the first', async () => {
    const tool = tools.get('issue_credit')!;
    const args = { accountId: 'acct_rep', amountCents: 1300 };
    const first = await executeToolCall(ledger, tool, args, call('repeat_1'));
    expect(first.status).toBe('completed');
    const again = await executeToolCall(ledger, tool, args, call('repeat_2')).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isOncelyError(again, 'APPROVAL_REQUIRED')).toBe(true);
    const firstKey = `mcp-${transport}:repeat_1`;
    expect((again as { details: { repeatOf: string } }).details.repeatOf).toBe(firstKey);
    const approval = await ledger.store.runs.getApproval('acme', `mcp-${transport}:repeat_2`);
    expect(approval).toMatchObject({ status: 'pending', repeatOf: firstKey });
    const credits = entries().filter((e) => e.tool === 'issue_credit' && e.key?.includes(':repeat_'));
    expect(credits.map((e) => e.key)).toEqual([firstKey]);
  });

  it('takes a repeat policy and identity per tool: refused, another amount for the same account is a repeat too', async () => {
    const [tool] = await mcpTools(connected.client, {
      only: ['issue_credit'],
      onRepeat: { issue_credit: 'refuse' },
      repeatKey: { issue_credit: ({ accountId }) => accountId },
    });
    const first = await executeToolCall(
      ledger,
      tool!,
      { accountId: 'acct_once', amountCents: 100 },
      call('once_1'),
    );
    expect(first.status).toBe('completed');
    const refused = await executeToolCall(
      ledger,
      tool!,
      { accountId: 'acct_once', amountCents: 999 },
      call('once_2'),
    ).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isOncelyError(refused, 'TOOL_CALL_REPEAT')).toBe(true);
    expect((refused as { details: unknown }).details).toMatchObject({
      repeatOf: `mcp-${transport}:once_1`,
      waiting: false,
      earlier: { status: 'completed' },
    });
    expect(
      entries()
        .filter((e) => e.key?.includes(':once_'))
        .map((e) => e.key),
    ).toEqual([`mcp-${transport}:once_1`]);
  });

  it('names the tools it has when asked for one it has not', async () => {
    await expect(mcpTools(connected.client, { only: ['refund'] })).rejects.toThrow(
      /the MCP server has no tool "refund"; it has: .*issue_credit/,
    );
  });

  it('runs under an AI SDK loop: the model asks, the MCP server applies one credit under the minted key', async () => {
    const result = (content: LanguageModelV3GenerateResult['content']): LanguageModelV3GenerateResult => ({
      content,
      finishReason: { unified: 'stop', raw: undefined },
      usage: {
        inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
        outputTokens: { total: 1, text: 1, reasoning: undefined },
      },
      warnings: [],
    });
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
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: `loop-${transport}` });
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
    const credits = entries().filter((e) => e.key?.startsWith(`loop-${transport}:call_`) === true);
    expect(credits).toHaveLength(1);
    expect(credits[0]?.amountCents).toBe(700);
  });
});
