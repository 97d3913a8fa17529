import { setTimeout as sleep } from 'node:timers/promises';
import type { LanguageModelV3GenerateResult } from '@ai-sdk/provider';
import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { MockLanguageModelV3 } from 'ai/test';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  defineAgent,
  defineTool,
  executeToolCall,
  external,
  Ledger,
  openRuntime,
  runTraceId,
  write,
  type Runtime,
} from '../../src/index.js';
import { openStore } from '../../src/store/index.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * OpenTelemetry spans, caught by an in-memory exporter: a drive of a run, its model calls (GenAI
 * conventions) and its tool calls (ledger attributes), every drive of one run in one trace, however
 * many processes drive it.
 */

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

beforeAll(() => {
  trace.setGlobalTracerProvider(provider);
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
});
afterAll(async () => {
  trace.disable();
  context.disable();
  await provider.shutdown();
});

const credit = defineTool({
  name: 'issue_credit',
  description: 'Credit an account',
  input: z.object({ accountId: z.string(), cents: z.number() }),
  effect: write(),
  execute: ({ accountId }) => ({ creditId: `cr_${accountId}` }),
});

/** A partner that never answers in time: its outcome is unknown until an operator says. */
const pay = defineTool({
  name: 'pay_partner',
  description: 'Pay a partner',
  input: z.object({ cents: z.number() }),
  effect: external(),
  timeoutMs: 50,
  execute: async (_args, ctx) => {
    await sleep(2_000, undefined, { signal: ctx.signal });
    return { paid: true };
  },
});

const USAGE = {
  inputTokens: { total: 120, noCache: 100, cacheRead: 20, cacheWrite: undefined },
  outputTokens: { total: 30, text: 30, reasoning: undefined },
};

function model(): MockLanguageModelV3 {
  const answers: LanguageModelV3GenerateResult[] = [
    {
      content: [
        {
          type: 'tool-call',
          toolCallId: 'a',
          toolName: 'issue_credit',
          input: '{"accountId":"acct_1","cents":2500}',
        },
        { type: 'tool-call', toolCallId: 'b', toolName: 'pay_partner', input: '{"cents":900}' },
      ],
      finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
      usage: USAGE,
      response: { modelId: 'gpt-5-2026-01-01' },
      warnings: [],
    },
    {
      content: [{ type: 'text', text: 'Credited and paid.' }],
      finishReason: { unified: 'stop', raw: 'stop' },
      usage: USAGE,
      warnings: [],
    },
  ];
  // The answer follows the conversation, as a process that did not ask the first question sees it.
  return new MockLanguageModelV3({
    modelId: 'gpt-5',
    doGenerate: ({ prompt }) => Promise.resolve(answers[prompt.some((m) => m.role === 'tool') ? 1 : 0]!),
  });
}

const agent = () =>
  defineAgent({
    name: 'support',
    instructions: 'Credit, then pay.',
    model: model(),
    tools: [credit, pay],
    toolPolicy: { onIndeterminate: 'pause' },
  });

const named = (name: string) => (s: ReadableSpan) => s.name === name;

describe.each(STORE_KINDS)('spans on %s', (kind) => {
  let opened: OpenedStore;
  const runtimes: Runtime[] = [];
  beforeEach(async () => {
    exporter.reset();
    opened = await openTestStore(kind, 'spans');
  });
  afterEach(async () => {
    for (const r of runtimes.splice(0)) await r.close();
    await opened.cleanup();
  });

  it('a run driven by two processes is one trace: drives, GenAI model calls, tool calls with their ledger facts', async () => {
    const first = await openRuntime({ store: opened.store, agents: [agent()] });
    runtimes.push(first);
    const paused = await first.run({ tenantId: 'acme', agent: 'support', input: 'go', runId: 'tr-1' });
    expect(paused.status).toBe('awaiting_reconciliation');

    const keyOf = async (tool: string) =>
      (await opened.store.ledger.list('acme', { runId: 'tr-1', limit: 10 })).find((r) => r.toolName === tool)
        ?.idempotencyKey;
    const payKey = await keyOf('pay_partner');
    expect(payKey).toBeDefined();
    await first.resolve({
      tenantId: 'acme',
      idempotencyKey: payKey!,
      status: 'completed',
      reason: 'the partner shows the payment',
      actorId: 'ops-ana',
      force: true,
    });

    // Another process (its own store connection and runtime) drives the run to its end.
    const otherStore = await openStore(opened.url);
    const second = await openRuntime({ store: otherStore, agents: [agent()] });
    runtimes.push(second);
    const done = await second.drive('acme', 'tr-1');
    expect([done.status, done.statusReason]).toEqual(['completed', null]);

    const spans = exporter.getFinishedSpans();
    const traceId = runTraceId('acme', 'tr-1');
    expect(traceId).toMatch(/^[0-9a-f]{32}$/);
    const drives = spans.filter(named('oncely.run.drive'));
    expect(drives).toHaveLength(2);
    for (const d of drives) {
      expect(d.spanContext().traceId).toBe(traceId);
      expect(d.attributes).toMatchObject({
        'oncely.run.id': 'tr-1',
        'oncely.tenant.id': 'acme',
        'oncely.agent': 'support',
        'oncely.drive.end': 'ended',
      });
    }
    // Both drives hang from the run's own parent, whoever drove.
    expect(new Set(drives.map((d) => d.parentSpanContext?.spanId)).size).toBe(1);
    expect(drives.map((d) => d.attributes['oncely.run.status'])).toEqual([
      'awaiting_reconciliation',
      'completed',
    ]);
    expect(drives[0]?.attributes['oncely.lease.epoch']).not.toBe(drives[1]?.attributes['oncely.lease.epoch']);

    const chats = spans.filter(named('chat gpt-5'));
    expect(chats).toHaveLength(2);
    expect(chats[0]?.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'mock-provider',
      'gen_ai.request.model': 'gpt-5',
      'gen_ai.response.model': 'gpt-5-2026-01-01',
      'gen_ai.usage.input_tokens': 120,
      'gen_ai.usage.output_tokens': 30,
      'gen_ai.response.finish_reasons': ['tool-calls'],
      'oncely.run.step': 1,
    });
    expect(chats[1]?.attributes).toMatchObject({
      'gen_ai.response.finish_reasons': ['stop'],
      'oncely.run.step': 2,
    });
    chats.forEach((c, i) => {
      expect(c.spanContext().traceId).toBe(traceId);
      expect(c.parentSpanContext?.spanId).toBe(drives[i]?.spanContext().spanId);
    });

    const creditKey = await keyOf('issue_credit');
    const credits = spans.filter(named('execute_tool issue_credit'));
    const pays = spans.filter(named('execute_tool pay_partner'));
    // First drive: both executed. Second drive: only the payment, whose outcome the model had not
    // heard, told as the operator settled it; nothing sent again.
    expect(credits.map((s) => s.attributes)).toMatchObject([
      {
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': 'issue_credit',
        'oncely.idempotency_key': creditKey,
        'oncely.effect': 'write',
        'oncely.reservation': 'reserved',
        'oncely.ledger.status': 'completed',
        'oncely.attempt': 1,
        'oncely.executed': true,
      },
    ]);
    expect(pays.map((s) => s.attributes)).toMatchObject([
      {
        'oncely.idempotency_key': payKey,
        'oncely.effect': 'external',
        'oncely.ledger.status': 'indeterminate',
        'oncely.executed': true,
      },
      { 'oncely.ledger.status': 'completed', 'oncely.executed': false, 'oncely.settled_by': 'operator' },
    ]);
    for (const [s, drive] of [
      [credits[0], drives[0]],
      [pays[0], drives[0]],
      [pays[1], drives[1]],
    ] as const) {
      expect(s?.spanContext().traceId).toBe(traceId);
      expect(s?.parentSpanContext?.spanId).toBe(drive?.spanContext().spanId);
    }
  });

  it('a guarded call outside a run is a span under whatever span is active', async () => {
    const ledger = new Ledger(opened.store);
    const tracer = trace.getTracer('app');
    await tracer.startActiveSpan('handle refund request', async (outer) => {
      await executeToolCall(
        ledger,
        credit,
        { accountId: 'acct_9', cents: 100 },
        {
          tenantId: 'acme',
          runId: 'api-request-1',
          toolCallId: 'credit-1',
        },
      );
      outer.end();
    });
    const outer = exporter.getFinishedSpans().find(named('handle refund request'));
    const call = exporter.getFinishedSpans().find(named('execute_tool issue_credit'));
    expect(call?.parentSpanContext?.spanId).toBe(outer?.spanContext().spanId);
    expect(call?.attributes).toMatchObject({ 'oncely.ledger.status': 'completed', 'oncely.attempt': 1 });
  });
});
