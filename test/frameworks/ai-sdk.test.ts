import type {
  LanguageModelV3Content,
  LanguageModelV3Prompt,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
} from '@ai-sdk/provider';
import { generateText, stepCountIs, streamText } from 'ai';
import { MockLanguageModelV3, convertArrayToReadableStream } from 'ai/test';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { heldCredit } from './fixtures/held-credit.js';
import {
  Ledger,
  ToolNotAttemptedError,
  decideToolApproval,
  defineTool,
  external,
  isOncelyError,
  read,
  resolveToolCall,
  type Tool,
} from '../../src/index.js';
import { durableLoop } from '../../src/frameworks/ai-sdk/index.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';

const USAGE = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 2, text: 2, reasoning: undefined },
};

function response(content: LanguageModelV3Content[]): LanguageModelV3GenerateResult {
  const calls = content.some((p) => p.type === 'tool-call');
  return {
    content,
    finishReason: { unified: calls ? 'tool-calls' : 'stop', raw: calls ? 'tool_calls' : 'stop' },
    usage: USAGE,
    warnings: [],
  };
}

const credit = (providerId: string, amountCents: number): LanguageModelV3Content => ({
  type: 'tool-call',
  toolCallId: providerId,
  toolName: 'issue_credit',
  input: JSON.stringify({ accountId: 'acct_7', amountCents }),
});

/** A model that answers from a script, one response per call, and counts the calls it was asked. */
function scripted(script: LanguageModelV3GenerateResult[]): {
  model: MockLanguageModelV3;
  asked: () => number;
} {
  let asked = 0;
  const model = new MockLanguageModelV3({
    doGenerate: () => {
      const next = script[asked];
      asked += 1;
      if (next === undefined) throw new Error(`the script has no response ${asked}`);
      return Promise.resolve(next);
    },
  });
  return { model, asked: () => asked };
}

/** A billing service's books: every credit it applied, with the key it came with. */

/** What stops a loop's run of `generateText` on 'Refund' (undefined if it ends): an oncely error. */
function stoppedBy(
  loop: ReturnType<typeof durableLoop>,
  model: Parameters<ReturnType<typeof durableLoop>['model']>[0],
  tools: Parameters<ReturnType<typeof durableLoop>['tools']>[0],
): Promise<unknown> {
  return loop
    .run(() =>
      generateText({
        model: loop.model(model),
        tools: loop.tools(tools),
        stopWhen: stepCountIs(5),
        prompt: 'Refund',
      }),
    )
    .then(
      () => undefined,
      (error: unknown) => error,
    );
}

class Billing {
  readonly credits: { key: string; amountCents: number }[] = [];
  effectsOf(key: string): number {
    return this.credits.filter((c) => c.key === key).length;
  }
}

function creditTool(billing: Billing, behave: (key: string) => Promise<void> | void = () => undefined): Tool {
  return defineTool({
    name: 'issue_credit',
    description: "Credit a customer's account",
    input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
    effect: external(),
    timeoutMs: 200,
    execute: async ({ amountCents }, ctx) => {
      await behave(ctx.idempotencyKey);
      billing.credits.push({ key: ctx.idempotencyKey, amountCents });
      return { receipt: `cr_${billing.credits.length}` };
    },
  });
}

describe.each(STORE_KINDS)('oncely/ai-sdk durable loop on %s', (kind) => {
  let opened: OpenedStore;
  let ledger: Ledger;
  beforeEach(async () => {
    opened = await openTestStore(kind, 'ai-sdk');
    ledger = new Ledger(opened.store, { actorId: 'test', landingMarginMs: 0 });
  });
  afterEach(async () => {
    await ledger.close();
    await opened.cleanup();
  });

  it('records each response before its tools run, keys calls by minted ids, and replays all of it after a restart', async () => {
    const billing = new Billing();
    const tools = [creditTool(billing)];
    const first = scripted([
      response([{ type: 'text', text: 'Crediting.' }, credit('call_1', 2500)]),
      response([{ type: 'text', text: 'Done: $25 credited.' }]),
    ]);
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-1' });
    const result = await loop.run(() =>
      generateText({
        model: loop.model(first.model),
        tools: loop.tools(tools),
        stopWhen: stepCountIs(5),
        prompt: 'Refund order 42',
      }),
    );
    expect(result.text).toBe('Done: $25 credited.');
    expect(first.asked()).toBe(2);
    const steps = await loop.steps();
    expect(steps.map((s) => s.step)).toEqual([0, 1]);
    const [call] = result.steps[0]!.toolCalls;
    expect(call?.toolCallId).toMatch(/^call_[0-9a-f]{16}$/);
    expect(call?.toolCallId).not.toBe('call_1');
    const key = `refund-1:${call!.toolCallId}`;
    expect(billing.credits).toEqual([{ key, amountCents: 2500 }]);
    expect((await ledger.store.ledger.get('acme', key))?.status).toBe('completed');
    expect(steps[0]?.usage).toMatchObject({ inputTokens: { total: 10 } });

    // A restart: a new process, a model that would answer differently if it were asked at all.
    const again = scripted([response([credit('call_9', 9900)]), response([{ type: 'text', text: 'other' }])]);
    const restarted = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-1' });
    const replay = await restarted.run(() =>
      generateText({
        model: restarted.model(again.model),
        tools: restarted.tools(tools),
        stopWhen: stepCountIs(5),
        prompt: 'Refund order 42',
      }),
    );
    expect(again.asked()).toBe(0);
    expect(replay.text).toBe('Done: $25 credited.');
    expect(replay.steps[0]?.toolCalls[0]?.toolCallId).toBe(call!.toolCallId);
    expect(billing.credits).toHaveLength(1);
    expect(await restarted.steps()).toHaveLength(2);
  });

  it('a provider that repeats a tool call id makes two credits two effects, never a silent replay', async () => {
    const billing = new Billing();
    const { model } = scripted([
      response([credit('call_1', 2500)]),
      response([credit('call_1', 2500)]),
      response([{ type: 'text', text: 'Two credits.' }]),
    ]);
    // Two identical credits meant as two effects: repeats are allowed here (the default asks first).
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-2', onRepeat: 'allow' });
    await loop.run(() =>
      generateText({
        model: loop.model(model),
        tools: loop.tools([creditTool(billing)]),
        stopWhen: stepCountIs(5),
        prompt: 'Two refunds',
      }),
    );
    expect(billing.credits).toHaveLength(2);
    expect(new Set(billing.credits.map((c) => c.key)).size).toBe(2);
  });

  it('an unknown call stops the loop: the model is not asked again and run() throws RUN_CALL_UNKNOWN', async () => {
    const billing = new Billing();
    // The billing API applies the credit, then answers after the tool's 200 ms timeout.
    const slow = creditTool(billing, () => new Promise((resolve) => setTimeout(resolve, 400)));
    const { model, asked } = scripted([
      response([credit('c', 2500)]),
      response([{ type: 'text', text: 'It failed, shall I retry?' }]),
    ]);
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-3' });
    const stopped = await stoppedBy(loop, model, [slow]);
    expect(isOncelyError(stopped, 'RUN_CALL_UNKNOWN')).toBe(true);
    expect(asked()).toBe(1);
    const key = (stopped as { details: { idempotencyKey: string } }).details.idempotencyKey;
    expect(key).toMatch(/^refund-3:call_/);
    expect((await ledger.store.ledger.get('acme', key))?.status).toBe('indeterminate');
    expect(await loop.steps()).toHaveLength(1);

    // With the default single step, the AI SDK ends the loop itself; run() still says it stopped.
    const single = scripted([response([credit('c', 100)])]);
    const once = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-3b' });
    await expect(
      once.run(() =>
        generateText({ model: once.model(single.model), tools: once.tools([slow]), prompt: 'Refund' }),
      ),
    ).rejects.toMatchObject({ code: 'RUN_CALL_UNKNOWN' });
    // A later call on a stopped loop never reaches the model.
    await expect(
      generateText({ model: once.model(single.model), tools: once.tools([slow]), prompt: 'Refund' }),
    ).rejects.toMatchObject({ code: 'RUN_CALL_UNKNOWN' });
    expect(single.asked()).toBe(1);
  });

  it('streamText: an expected stop is logged by the AI SDK unless onError leaves it out (the one-liner of docs/frameworks.md)', async () => {
    const billing = new Billing();
    const slow = creditTool(billing, () => new Promise((resolve) => setTimeout(resolve, 400)));
    const model = new MockLanguageModelV3({
      doStream: () =>
        Promise.resolve({
          stream: convertArrayToReadableStream<LanguageModelV3StreamPart>([
            { type: 'stream-start', warnings: [] },
            {
              type: 'tool-call',
              toolCallId: 'c',
              toolName: 'issue_credit',
              input: '{"accountId":"a","amountCents":1}',
            },
            { type: 'finish', usage: USAGE, finishReason: { unified: 'tool-calls', raw: 'tool_calls' } },
          ]),
        }),
    });
    const logged = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    try {
      for (const quiet of [false, true]) {
        logged.mockClear();
        const loop = durableLoop({ ledger, tenantId: 'acme', runId: `refund-stream-${String(quiet)}` });
        const stopped = await loop
          .run(async () => {
            const result = streamText({
              model: loop.model(model),
              tools: loop.tools([slow]),
              stopWhen: stepCountIs(5),
              prompt: 'Refund',
              ...(quiet
                ? {
                    onError: ({ error }: { error: unknown }) => {
                      if (error !== loop.stopped) console.error(error);
                    },
                  }
                : {}),
            });
            for await (const text of result.textStream) expect(text).toBe('never');
            return result.text;
          })
          .catch((error: unknown) => error);
        expect(isOncelyError(stopped, 'RUN_CALL_UNKNOWN')).toBe(true);
        // The model was asked once; the second step's model call was refused with the stop.
        expect(logged.mock.calls.map(([e]) => (e as { code?: string }).code)).toEqual(
          quiet ? [] : ['RUN_CALL_UNKNOWN'],
        );
      }
    } finally {
      logged.mockRestore();
    }
  });

  it('tells the model in plain words when a call did not take effect, the same words on a replay', async () => {
    const refused = defineTool({
      name: 'issue_credit',
      description: 'Credit',
      input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
      effect: external(),
      execute: () => {
        throw new ToolNotAttemptedError('the billing token expired');
      },
    });
    const { model } = scripted([response([credit('c', 2500)]), response([{ type: 'text', text: 'Sorry.' }])]);
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-4' });
    const result = await loop.run(() =>
      generateText({
        model: loop.model(model),
        tools: loop.tools([refused]),
        stopWhen: stepCountIs(5),
        prompt: 'Refund',
      }),
    );
    // What the model heard: the tool result in the prompt of its second call.
    const heard = (prompt: LanguageModelV3Prompt | undefined) =>
      prompt
        ?.flatMap((m) => (m.role === 'tool' ? m.content : []))
        .flatMap((p) => (p.type === 'tool-result' ? [p.output] : []));
    const output = heard(model.doGenerateCalls[1]?.prompt)?.[0] as
      { type: string; value: { status: string; note: string } } | undefined;
    expect(output?.type).toBe('error-json');
    expect(output?.value.status).toBe('not_attempted');
    expect(output?.value.note).toMatch(/did not take effect/);

    const again = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-4' });
    const replay = await again.run(() =>
      generateText({
        model: again.model(model),
        tools: again.tools([refused]),
        stopWhen: stepCountIs(5),
        prompt: 'Refund',
      }),
    );
    expect(replay.response.messages).toEqual(result.response.messages);
    expect(replay.steps.map((step) => step.content)).toEqual(result.steps.map((step) => step.content));
    expect(replay.text).toBe('Sorry.');
    expect(model.doGenerateCalls).toHaveLength(2); // the replay asked nothing
  });

  it('refuses a restart whose conversation is not the one recorded (LOOP_DIVERGED)', async () => {
    const lookup = defineTool({
      name: 'lookup_order',
      description: 'Look up an order',
      input: z.object({ orderId: z.string() }),
      effect: read(),
      execute: () => ({ status: 'shipped' }),
    });
    const first = scripted([response([{ type: 'text', text: 'Shipped.' }])]);
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-5' });
    await loop.run(() =>
      generateText({
        model: loop.model(first.model),
        tools: loop.tools([lookup]),
        prompt: 'Where is order 42?',
      }),
    );
    const other = scripted([response([{ type: 'text', text: 'x' }])]);
    const again = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-5' });
    await expect(
      generateText({
        model: again.model(other.model),
        tools: again.tools([lookup]),
        prompt: 'Refund me $500',
      }),
    ).rejects.toMatchObject({ code: 'LOOP_DIVERGED' });
    // A system prompt is not part of the conversation: one that names today's date still replays.
    await generateText({
      model: again.model(other.model),
      system: `Today is ${Date.now()}`,
      tools: again.tools([lookup]),
      prompt: 'Where is order 42?',
    });
    expect(other.asked()).toBe(0);
  });

  it('refuses, at the start, a run id its calls could not be keyed under (the ledger rule of every run id)', () => {
    for (const runId of ['', 'refund/7', 'refund 7', 'a:b', 'x'.repeat(129), 'caf\u00e9']) {
      expect(() => durableLoop({ ledger, tenantId: 'acme', runId }), runId).toThrow(
        expect.objectContaining({ code: 'RUN_INPUT_INVALID' }),
      );
    }
    expect(() => durableLoop({ ledger, tenantId: 'acme', runId: 'refund-7.a_B' })).not.toThrow();
  });

  it('refuses to run a tool call whose id did not come through loop.model()', async () => {
    const billing = new Billing();
    const { model } = scripted([response([credit('call_1', 2500)])]);
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-6' });
    await expect(
      loop.run(() => generateText({ model, tools: loop.tools([creditTool(billing)]), prompt: 'Refund' })),
    ).rejects.toMatchObject({ code: 'LOOP_CALL_NOT_MINTED' });
    expect(billing.credits).toHaveLength(0);
  });

  it('streams text as it arrives, holds tool calls until the response is recorded, and replays the stream', async () => {
    const billing = new Billing();
    const tools = [creditTool(billing)];
    let streamed = 0;
    const chunks: LanguageModelV3StreamPart[][] = [
      [
        { type: 'stream-start', warnings: [] },
        { type: 'text-start', id: 't' },
        { type: 'text-delta', id: 't', delta: 'Credit' },
        { type: 'text-delta', id: 't', delta: 'ing.' },
        { type: 'text-end', id: 't' },
        { type: 'tool-input-start', id: 'p1', toolName: 'issue_credit' },
        { type: 'tool-input-delta', id: 'p1', delta: '{"accountId":"acct_7","amountCents":2500}' },
        { type: 'tool-input-end', id: 'p1' },
        {
          type: 'tool-call',
          toolCallId: 'p1',
          toolName: 'issue_credit',
          input: '{"accountId":"acct_7","amountCents":2500}',
        },
        { type: 'finish', usage: USAGE, finishReason: { unified: 'tool-calls', raw: 'tool_calls' } },
      ],
      [
        { type: 'stream-start', warnings: [] },
        { type: 'text-start', id: 't' },
        { type: 'text-delta', id: 't', delta: 'Done.' },
        { type: 'text-end', id: 't' },
        { type: 'finish', usage: USAGE, finishReason: { unified: 'stop', raw: 'stop' } },
      ],
    ];
    const model = new MockLanguageModelV3({
      doStream: () => {
        const parts = chunks[streamed];
        streamed += 1;
        if (parts === undefined) throw new Error('no more streams');
        return Promise.resolve({ stream: convertArrayToReadableStream(parts) });
      },
    });
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-7' });
    const run = async (l: typeof loop) => {
      const result = streamText({
        model: l.model(model),
        tools: l.tools(tools),
        stopWhen: stepCountIs(5),
        prompt: 'Refund',
      });
      const deltas: string[] = [];
      for await (const part of result.fullStream) if (part.type === 'text-delta') deltas.push(part.text);
      return { deltas, steps: await result.steps, text: await result.text };
    };
    const first = await run(loop);
    expect(first.deltas).toEqual(['Credit', 'ing.', 'Done.']);
    expect(first.text).toBe('Done.');
    const id = first.steps[0]?.toolCalls[0]?.toolCallId;
    expect(id).toMatch(/^call_[0-9a-f]{16}$/);
    expect(billing.credits).toEqual([{ key: `refund-7:${id}`, amountCents: 2500 }]);

    const replay = await run(durableLoop({ ledger, tenantId: 'acme', runId: 'refund-7' }));
    expect(streamed).toBe(2);
    expect(replay.text).toBe('Done.');
    expect(replay.steps[0]?.toolCalls[0]?.toolCallId).toBe(id);
    expect(replay.deltas.join('')).toBe('Crediting.Done.');
    expect(billing.credits).toHaveLength(1);
  });

  it('an operator’s completed without a result is told with the reference and the reason, never a bare null', async () => {
    const billing = new Billing();
    // The request left and the answer never came: the call is unknown (its late outcome too).
    const lost = defineTool({
      name: 'issue_credit',
      description: "Credit a customer's account",
      input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
      effect: external(),
      timeoutMs: 100,
      execute: async ({ amountCents }, ctx) => {
        billing.credits.push({ key: ctx.idempotencyKey, amountCents });
        await new Promise((_, reject) =>
          ctx.signal.addEventListener('abort', () => reject(new Error('connection reset')), { once: true }),
        );
      },
    });
    const first = scripted([response([credit('c', 2500)])]);
    const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-op' });
    const stopped = await stoppedBy(loop, first.model, [lost]);
    expect(isOncelyError(stopped, 'RUN_CALL_UNKNOWN')).toBe(true);
    const key = (stopped as { details: { idempotencyKey: string } }).details.idempotencyKey;
    await resolveToolCall(ledger, {
      tenantId: 'acme',
      idempotencyKey: key,
      status: 'completed',
      reason: 'the credit is in the billing console',
      resultReference: 'cr_console_77',
      actorId: 'ops-ana',
    });

    const second = scripted([response([{ type: 'text', text: 'Credited.' }])]);
    const again = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-op' });
    const result = await again.run(() =>
      generateText({
        model: again.model(second.model),
        tools: again.tools([lost]),
        stopWhen: stepCountIs(5),
        prompt: 'Refund',
      }),
    );
    expect(result.text).toBe('Credited.');
    const told = second.model.doGenerateCalls[0]?.prompt
      .flatMap((m) => (m.role === 'tool' ? m.content : []))
      .flatMap((p) => (p.type === 'tool-result' ? [p.output] : []));
    expect(told).toEqual([
      {
        type: 'json',
        value: {
          status: 'completed',
          result: null,
          result_reference: 'cr_console_77',
          settled_by: 'operator ops-ana',
          reason: 'the credit is in the billing console',
          note: 'An operator checked the downstream system and settled this call: it took effect. Do not make it again.',
        },
      },
    ]);
    expect(billing.effectsOf(key)).toBe(1);
  });

  it('a call still running in another live process stops the loop with CALL_IN_FLIGHT and when to look again, not RUN_CALL_UNKNOWN', async () => {
    const billing = new Billing();
    const { tool: slow, release, started } = heldCredit(billing, 'cr_1');
    // Process A: its attempt is in flight.
    const a = scripted([response([credit('c', 2500)]), response([{ type: 'text', text: 'Done.' }])]);
    const loopA = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-live' });
    const drivingA = loopA.run(() =>
      generateText({
        model: loopA.model(a.model),
        tools: loopA.tools([slow]),
        stopWhen: stepCountIs(5),
        prompt: 'Refund',
      }),
    );
    const key = await started;

    // Process B: the same run, restarted elsewhere while A is alive.
    const otherLedger = new Ledger(opened.store, { actorId: 'other', landingMarginMs: 0 });
    const b = scripted([response([{ type: 'text', text: 'never asked' }])]);
    const loopB = durableLoop({ ledger: otherLedger, tenantId: 'acme', runId: 'refund-live' });
    const before = Date.now();
    const stopped = await stoppedBy(loopB, b.model, [slow]);
    expect(isOncelyError(stopped, 'CALL_IN_FLIGHT')).toBe(true);
    const details = (
      stopped as { details: { idempotencyKey: string; retryAt: string; retryAfterMs: number } }
    ).details;
    expect(details.idempotencyKey).toBe(key);
    const record = await ledger.store.ledger.get('acme', key);
    expect(record?.status).toBe('started');
    // When A's attempt can no longer land: its start plus its 3 s timeout (plus the 0 ms margin).
    expect(Date.parse(details.retryAt)).toBe(Date.parse(record!.attemptStartedAt) + 3_000);
    expect(details.retryAfterMs).toBeGreaterThan(0);
    expect(details.retryAfterMs).toBeLessThanOrEqual(Date.parse(details.retryAt) - before);
    expect(b.asked()).toBe(0);

    release();
    expect((await drivingA).text).toBe('Done.');
    // Looked at again, B finds the call completed and carries on; one credit in all.
    const b2 = scripted([response([{ type: 'text', text: 'Done.' }])]);
    const loopB2 = durableLoop({ ledger: otherLedger, tenantId: 'acme', runId: 'refund-live' });
    const replay = await loopB2.run(() =>
      generateText({
        model: loopB2.model(b2.model),
        tools: loopB2.tools([slow]),
        stopWhen: stepCountIs(5),
        prompt: 'Refund',
      }),
    );
    expect(replay.text).toBe('Done.');
    expect(billing.credits).toEqual([{ key, amountCents: 2500 }]);
    await otherLedger.drain();
  });

  it('corrects the model at its next call when a call it was told did not take effect lands after all', async () => {
    const billing = new Billing();
    const { tool: slow, release, started } = heldCredit(billing, 'cr_late');
    const lookup = defineTool({
      name: 'lookup_order',
      description: 'Look up an order',
      input: z.object({ orderId: z.string() }),
      effect: read(),
      execute: () => ({ status: 'shipped' }),
    });
    // Process A's attempt is in flight when an operator forces the call `failed`.
    // (A's loop ends with the step: B, not A, asks the model next.)
    const a = scripted([response([credit('c', 2500)])]);
    const loopA = durableLoop({ ledger, tenantId: 'acme', runId: 'refund-late' });
    const drivingA = loopA
      .run(() =>
        generateText({
          model: loopA.model(a.model),
          tools: loopA.tools([slow]),
          stopWhen: stepCountIs(1),
          prompt: 'Refund',
        }),
      )
      .catch((error: unknown) => error);
    const key = await started;
    await resolveToolCall(ledger, {
      tenantId: 'acme',
      idempotencyKey: key,
      status: 'failed',
      reason: 'nothing in the billing console',
      actorId: 'ops-ana',
      force: true,
    });
    // Process B (one attempt per key) is told "did not take effect"; then A's effect lands.
    const otherLedger = new Ledger(opened.store, { actorId: 'other', landingMarginMs: 0, maxAttempts: 1 });
    const lookupOrder = (orderId: string): LanguageModelV3Content => ({
      type: 'tool-call',
      toolCallId: orderId,
      toolName: 'lookup_order',
      input: JSON.stringify({ orderId }),
    });
    let asked = 0;
    const script = [
      response([lookupOrder('o_1')]),
      response([lookupOrder('o_2')]),
      response([{ type: 'text', text: 'Corrected.' }]),
    ];
    const b = new MockLanguageModelV3({
      doGenerate: async () => {
        asked += 1;
        if (asked === 1) {
          release();
          await drivingA;
        }
        return script[asked - 1]!;
      },
    });
    const loopB = durableLoop({ ledger: otherLedger, tenantId: 'acme', runId: 'refund-late' });
    const result = await loopB.run(() =>
      generateText({
        model: loopB.model(b),
        tools: loopB.tools([slow, lookup]),
        stopWhen: stepCountIs(6),
        prompt: 'Refund',
      }),
    );
    expect(result.text).toBe('Corrected.');
    const record = await ledger.store.ledger.get('acme', key);
    expect(record).toMatchObject({ status: 'failed', settledBy: { kind: 'operator', id: 'ops-ana' } });
    expect(record?.conflictAt).not.toBeNull();
    expect(billing.credits).toEqual([{ key, amountCents: 2500 }]);

    const prompts = b.doGenerateCalls.map((c) => c.prompt);
    const told = prompts[0]
      ?.flatMap((m) => (m.role === 'tool' ? m.content : []))
      .flatMap((p) => (p.type === 'tool-result' ? [p.output] : []));
    expect(told).toMatchObject([{ type: 'error-json', value: { status: 'did_not_take_effect' } }]);
    const corrections = (prompt: LanguageModelV3Prompt | undefined) =>
      (prompt ?? []).flatMap((m) =>
        m.role === 'user'
          ? m.content.flatMap((p) => (p.type === 'text' && p.text.startsWith('Correction') ? [p.text] : []))
          : [],
      );
    expect(corrections(prompts[0])).toEqual([]);
    const [correction] = corrections(prompts[1]);
    const callId = key.split(':')[1];
    const value = JSON.parse(
      correction?.split(`tool call ${callId} (issue_credit): `)[1] ?? 'null',
    ) as unknown;
    expect(value).toMatchObject({
      status: 'took_effect',
      result: { receipt: 'cr_late' },
      settled_by: 'operator ops-ana',
      reason: 'nothing in the billing console',
    });
    expect(corrections(prompts[2])).toEqual([correction]);
    await otherLedger.drain();
  });

  describe('repeats: the model credits again with the same arguments', () => {
    /** A model that credits $25 at one step, again at the next, then ends. */
    const twice = () =>
      scripted([
        response([credit('c1', 2500)]),
        response([credit('c2', 2500)]),
        response([{ type: 'text', text: 'Done.' }]),
      ]);
    const toolResults = (prompt: LanguageModelV3Prompt | undefined) =>
      (prompt ?? [])
        .flatMap((m) => (m.role === 'tool' ? m.content : []))
        .flatMap((p) => (p.type === 'tool-result' ? [p.output] : []));

    it('asks by default: the second is not run, its approval names the first, and the loop stops waiting for it', async () => {
      const billing = new Billing();
      const tools = [creditTool(billing)];
      const { model, asked } = twice();
      const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'repeat-ask' });
      const stopped = await stoppedBy(loop, model, tools);
      expect(isOncelyError(stopped, 'APPROVAL_REQUIRED')).toBe(true);
      expect(loop.stopped).toBe(stopped);
      expect(asked()).toBe(2); // not asked again once the loop stopped
      expect(billing.credits).toHaveLength(1);
      const first = billing.credits[0]!.key;
      const { key, repeatOf } = (stopped as { details: { key: string; repeatOf: string } }).details;
      expect(repeatOf).toBe(first);
      expect(await ledger.store.runs.getApproval('acme', key)).toMatchObject({
        status: 'pending',
        repeatOf: first,
      });
      expect(await ledger.store.ledger.get('acme', key)).toBeUndefined();

      // Approved, the same loop run again replays the first credit and makes the second.
      await decideToolApproval(ledger, 'approved', { tenantId: 'acme', idempotencyKey: key, actorId: 'ops' });
      const again = durableLoop({ ledger, tenantId: 'acme', runId: 'repeat-ask' });
      expect(await stoppedBy(again, model, tools)).toBeUndefined();
      expect(billing.credits.map((c) => c.key)).toEqual([first, key]);
    });

    it("refuses under onRepeat: 'refuse': the model hears repeat_refused naming the first call, one credit", async () => {
      const billing = new Billing();
      const { model } = twice();
      const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'repeat-refuse', onRepeat: 'refuse' });
      expect(await stoppedBy(loop, model, [creditTool(billing)])).toBeUndefined();
      expect(billing.credits).toHaveLength(1);
      const told = toolResults(model.doGenerateCalls[2]?.prompt);
      expect(told).toEqual([
        { type: 'json', value: { receipt: 'cr_1' } },
        {
          type: 'error-json',
          value: {
            status: 'repeat_refused',
            earlier: {
              key: billing.credits[0]!.key,
              status: 'completed',
              result: { receipt: 'cr_1' },
              result_reference: null,
            },
            note: expect.stringMatching(/refused as a repeat of that call/) as unknown,
          },
        },
      ]);
    });

    it("runs both under onRepeat: 'allow': two effects", async () => {
      const billing = new Billing();
      const { model } = twice();
      const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'repeat-allow', onRepeat: 'allow' });
      expect(await stoppedBy(loop, model, [creditTool(billing)])).toBeUndefined();
      expect(billing.credits).toHaveLength(2);
    });

    it('of two identical calls in one response, the first goes out and the second is a repeat of it', async () => {
      const billing = new Billing();
      const { model } = scripted([
        response([credit('c1', 2500), credit('c2', 2500)]),
        response([{ type: 'text', text: 'Done.' }]),
      ]);
      const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'repeat-same-step' });
      const stopped = await stoppedBy(loop, model, [creditTool(billing)]);
      expect(isOncelyError(stopped, 'APPROVAL_REQUIRED')).toBe(true);
      expect(billing.credits).toHaveLength(1);
      expect((stopped as { details: { repeatOf: string } }).details.repeatOf).toBe(billing.credits[0]!.key);
    });

    it('a conversation whose turns are runs: a repeat across turns is caught, and waits while the first is unknown', async () => {
      const billing = new Billing();
      // The billing API applies the credit, then answers after the tool's 200 ms timeout: unknown.
      const slow = creditTool(billing, () => new Promise((resolve) => setTimeout(resolve, 400)));
      const turn = (runId: string) =>
        durableLoop({ ledger, tenantId: 'acme', runId, conversationId: 'chat-9' });
      const first = await stoppedBy(turn('chat-9-turn-1'), scripted([response([credit('c', 2500)])]).model, [
        slow,
      ]);
      expect(isOncelyError(first, 'RUN_CALL_UNKNOWN')).toBe(true);
      const firstKey = (first as { details: { idempotencyKey: string } }).details.idempotencyKey;

      const second = scripted([response([credit('c', 2500)]), response([{ type: 'text', text: 'x' }])]);
      const waiting = await stoppedBy(turn('chat-9-turn-2'), second.model, [slow]);
      expect(isOncelyError(waiting, 'TOOL_CALL_REPEAT')).toBe(true);
      expect((waiting as { details: { waiting: boolean; repeatOf: string } }).details).toMatchObject({
        waiting: true,
        repeatOf: firstKey,
      });
      expect(second.asked()).toBe(1);

      // Settled as taken effect, the next turn's repeat is asked about, naming the first turn's call.
      await resolveToolCall(ledger, {
        tenantId: 'acme',
        idempotencyKey: firstKey,
        status: 'completed',
        reason: 'in the billing console',
        actorId: 'ops',
      });
      const third = scripted([response([credit('c', 2500)])]);
      const asked = await stoppedBy(turn('chat-9-turn-3'), third.model, [slow]);
      expect(isOncelyError(asked, 'APPROVAL_REQUIRED')).toBe(true);
      const { key, repeatOf } = (asked as { details: { key: string; repeatOf: string } }).details;
      expect(repeatOf).toBe(firstKey);
      expect(key).toMatch(/^chat-9-turn-3:call_/);
      expect(await ledger.store.ledger.get('acme', key)).toBeUndefined(); // reserved nothing
    });
  });
});

describe('oncely/ai-sdk: the model', () => {
  it('refuses a model of another AI SDK generation, saying what to install', async () => {
    const opened = await openTestStore('sqlite', 'ai-sdk-model');
    const ledger = new Ledger(opened.store);
    try {
      const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'r1' });
      const v2 = { specificationVersion: 'v2', provider: 'p', modelId: 'm', doGenerate: () => undefined };
      expect(() => loop.model(v2 as never)).toThrow(/specification v2 \(AI SDK 5\).*install a provider/);
    } finally {
      await ledger.close();
      await opened.cleanup();
    }
  });
});
