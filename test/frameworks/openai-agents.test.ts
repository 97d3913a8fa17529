import {
  Agent,
  Runner,
  Usage,
  type Model,
  type ModelRequest,
  type ModelResponse,
  type StreamEvent,
} from '@openai/agents-core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { heldCredit } from './fixtures/held-credit.js';
import {
  Ledger,
  decideToolApproval,
  defineTool,
  external,
  isOncelyError,
  resolveToolCall,
  type Tool,
} from '../../src/index.js';
import { durableAgentRun } from '../../src/frameworks/openai-agents/index.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';

type Output = ModelResponse['output'];

const creditCall = (callId: string, amountCents: number): Output[number] => ({
  type: 'function_call',
  callId,
  name: 'issue_credit',
  arguments: JSON.stringify({ accountId: 'acct_7', amountCents }),
  status: 'completed',
});
const say = (text: string): Output[number] => ({
  type: 'message',
  role: 'assistant',
  status: 'completed',
  content: [{ type: 'output_text', text }],
});

/** An Agents SDK model answering from a script, counting the times it was asked. */
class ScriptedModel implements Model {
  asked = 0;
  readonly inputs: ModelRequest['input'][] = [];
  constructor(private readonly script: Output[]) {}
  getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.inputs.push(structuredClone(request.input));
    const output = this.script[this.asked];
    this.asked += 1;
    if (output === undefined) throw new Error(`the script has no response ${this.asked}`);
    return Promise.resolve({
      output,
      usage: new Usage({ requests: 1, inputTokens: 10, outputTokens: 2, totalTokens: 12 }),
    });
  }
  getStreamedResponse(): AsyncIterable<never> {
    return {
      [Symbol.asyncIterator]: () => {
        throw new Error('not streamed in these tests');
      },
    };
  }
}

class Billing {
  readonly credits: { key: string; amountCents: number }[] = [];
}

function creditTool(billing: Billing, options: { approval?: boolean; slowMs?: number } = {}): Tool {
  return defineTool({
    name: 'issue_credit',
    description: "Credit a customer's account",
    input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
    effect: external({ approval: options.approval ?? false }),
    timeoutMs: 200,
    execute: async ({ amountCents }, ctx) => {
      if (options.slowMs !== undefined) await new Promise((r) => setTimeout(r, options.slowMs));
      billing.credits.push({ key: ctx.idempotencyKey, amountCents });
      return { receipt: `cr_${billing.credits.length}` };
    },
  });
}

const runner = new Runner({ tracingDisabled: true });

describe.each(STORE_KINDS)('oncely/openai-agents on %s', (kind) => {
  let opened: OpenedStore;
  let ledger: Ledger;
  beforeEach(async () => {
    opened = await openTestStore(kind, 'openai-agents');
    ledger = new Ledger(opened.store, { actorId: 'test', landingMarginMs: 0 });
  });
  afterEach(async () => {
    await ledger.close();
    await opened.cleanup();
  });

  function agentOf(run: ReturnType<typeof durableAgentRun>, model: Model, tool: Tool) {
    return new Agent({
      name: 'billing',
      instructions: 'Help.',
      model: run.model(model),
      tools: run.tools([tool]),
    });
  }

  it('records each response before its calls run, keys them by minted ids, and replays all of it after a restart', async () => {
    const billing = new Billing();
    const tool = creditTool(billing);
    const model = new ScriptedModel([[creditCall('call_1', 2500)], [say('Credited $25.')]]);
    const first = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-1' });
    const result = await first.run(() => runner.run(agentOf(first, model, tool), 'Refund order 42'));
    expect(result.finalOutput).toBe('Credited $25.');
    expect(model.asked).toBe(2);
    expect(billing.credits).toHaveLength(1);
    expect(billing.credits[0]?.key).toMatch(/^agents-1:call_[0-9a-f]{16}$/);
    expect(await first.steps()).toHaveLength(2);

    const other = new ScriptedModel([[creditCall('call_9', 9900)], [say('something else')]]);
    const restarted = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-1' });
    const replay = await restarted.run(() => runner.run(agentOf(restarted, other, tool), 'Refund order 42'));
    expect(other.asked).toBe(0);
    expect(replay.finalOutput).toBe('Credited $25.');
    expect(billing.credits).toHaveLength(1);
  });

  it('a provider that repeats a call id makes two credits two effects', async () => {
    const billing = new Billing();
    const model = new ScriptedModel([
      [creditCall('call_1', 100)],
      [creditCall('call_1', 100)],
      [say('Two.')],
    ]);
    // Two identical credits meant as two effects: repeats are allowed here (the default asks first).
    const run = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-2', onRepeat: 'allow' });
    await run.run(() => runner.run(agentOf(run, model, creditTool(billing)), 'Two refunds'));
    expect(new Set(billing.credits.map((c) => c.key)).size).toBe(2);
  });

  it('an unknown call stops the run: the model is not asked again and run() throws RUN_CALL_UNKNOWN', async () => {
    const billing = new Billing();
    const model = new ScriptedModel([[creditCall('c', 2500)], [say('It failed, shall I retry?')]]);
    const run = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-3' });
    const stopped = await run
      .run(() => runner.run(agentOf(run, model, creditTool(billing, { slowMs: 400 })), 'Refund'))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(isOncelyError(stopped, 'RUN_CALL_UNKNOWN')).toBe(true);
    expect(model.asked).toBe(1);
    const key = (stopped as { details: { idempotencyKey: string } }).details.idempotencyKey;
    expect((await ledger.store.ledger.get('acme', key))?.status).toBe('indeterminate');
  });

  it('a call still running in another live process stops the run with CALL_IN_FLIGHT, not RUN_CALL_UNKNOWN', async () => {
    const billing = new Billing();
    const { tool: slow, release, started } = heldCredit(billing, 'cr_1');
    const a = new ScriptedModel([[creditCall('c', 2500)], [say('Credited.')]]);
    const runA = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-live' });
    const drivingA = runA.run(() => runner.run(agentOf(runA, a, slow), 'Refund'));
    const key = await started;

    // Another process restarts the same run while A's attempt is in flight.
    const otherLedger = new Ledger(opened.store, { actorId: 'other', landingMarginMs: 0 });
    const b = new ScriptedModel([[say('never asked')]]);
    const runB = durableAgentRun({ ledger: otherLedger, tenantId: 'acme', runId: 'agents-live' });
    const stopped = await runB
      .run(() => runner.run(agentOf(runB, b, slow), 'Refund'))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(isOncelyError(stopped, 'CALL_IN_FLIGHT')).toBe(true);
    const details = (
      stopped as { details: { idempotencyKey: string; retryAt: string; retryAfterMs: number } }
    ).details;
    expect(details.idempotencyKey).toBe(key);
    const record = await ledger.store.ledger.get('acme', key);
    expect(record?.status).toBe('started');
    expect(Date.parse(details.retryAt)).toBe(Date.parse(record!.attemptStartedAt) + 3_000);
    expect(details.retryAfterMs).toBeGreaterThan(0);
    expect(b.asked).toBe(0);

    release();
    expect((await drivingA).finalOutput).toBe('Credited.');
    expect(billing.credits).toEqual([{ key, amountCents: 2500 }]);
    await otherLedger.drain();
  });

  it('tells the model an operator’s completed with the reference and the reason, not a bare null', async () => {
    const billing = new Billing();
    const model = new ScriptedModel([[creditCall('c', 2500)], [say('Credited.')]]);
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
    const run = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-op' });
    const stopped = await run
      .run(() => runner.run(agentOf(run, model, lost), 'Refund'))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
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
    const again = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-op' });
    const result = await again.run(() => runner.run(agentOf(again, model, lost), 'Refund'));
    expect(result.finalOutput).toBe('Credited.');
    expect(model.asked).toBe(2);
    const results = (model.inputs[1] as unknown as { type?: string; output?: unknown }[]).filter(
      (i) => i.type === 'function_call_result',
    );
    const told = JSON.stringify(results.map((r) => r.output));
    expect(told).toContain('cr_console_77');
    expect(told).toContain('the credit is in the billing console');
    expect(told).toContain('operator ops-ana');
    expect(billing.credits).toHaveLength(1);
  });

  it('streams: records the completed response before its calls run, and replays it as a stream', async () => {
    const billing = new Billing();
    const tool = creditTool(billing);
    let streamed = 0;
    const responses: Output[] = [[creditCall('p1', 2500)], [say('Done.')]];
    const model: Model = {
      getResponse: () => Promise.reject(new Error('streamed only')),
      async *getStreamedResponse() {
        const output = responses[streamed];
        streamed += 1;
        if (output === undefined) throw new Error('no more responses');
        await Promise.resolve();
        yield { type: 'response_started' };
        yield {
          type: 'response_done',
          response: {
            id: `resp_${streamed}`,
            usage: { requests: 1, inputTokens: 5, outputTokens: 1, totalTokens: 6 },
            output,
          },
        } as StreamEvent;
      },
    };
    const drive = async () => {
      const run = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-5' });
      const result = await run.run(async () => {
        const streamedRun = await runner.run(agentOf(run, model, tool), 'Refund', { stream: true });
        await streamedRun.completed;
        return streamedRun;
      });
      return result.finalOutput;
    };
    expect(await drive()).toBe('Done.');
    expect(billing.credits).toHaveLength(1);
    expect(billing.credits[0]?.key).toMatch(/^agents-5:call_[0-9a-f]{16}$/);
    expect(await drive()).toBe('Done.'); // a restart: replayed, the model not asked, no second credit
    expect(streamed).toBe(2);
    expect(billing.credits).toHaveLength(1);
  });

  it('a replayed streamed response streams its text, as the live one did', async () => {
    const billing = new Billing();
    const tool = creditTool(billing);
    let streamed = 0;
    const model: Model = {
      getResponse: () => Promise.reject(new Error('streamed only')),
      async *getStreamedResponse() {
        streamed += 1;
        await Promise.resolve();
        yield { type: 'response_started' };
        const first = streamed === 1;
        if (!first) for (const delta of ['Refunded ', '$25.']) yield { type: 'output_text_delta', delta };
        yield {
          type: 'response_done',
          response: {
            id: `resp_${streamed}`,
            usage: { requests: 1, inputTokens: 5, outputTokens: 1, totalTokens: 6 },
            output: first ? [creditCall('p1', 2500)] : [say('Refunded $25.')],
          },
        } as StreamEvent;
      },
    };
    const drive = async () => {
      const run = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-text' });
      return run.run(async () => {
        const streamedRun = await runner.run(agentOf(run, model, tool), 'Refund', { stream: true });
        const chunks: string[] = [];
        for await (const chunk of streamedRun.toTextStream()) chunks.push(chunk);
        await streamedRun.completed;
        return { chunks, output: streamedRun.finalOutput };
      });
    };
    expect(await drive()).toEqual({ chunks: ['Refunded ', '$25.'], output: 'Refunded $25.' });
    // A restart: both steps replayed, the model not asked; the text streams again, whole.
    expect(await drive()).toEqual({ chunks: ['Refunded $25.'], output: 'Refunded $25.' });
    expect(streamed).toBe(2);
    expect(billing.credits).toHaveLength(1);
  });

  it('a repeat of a credit: asked about by default (the run stops), refused under refuse (its output says so)', async () => {
    const billing = new Billing();
    const script = (): Output[] => [[creditCall('c1', 100)], [creditCall('c2', 100)], [say('Done.')]];
    const asking = new ScriptedModel(script());
    const run = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-repeat-ask' });
    const stopped = await run
      .run(() => runner.run(agentOf(run, asking, creditTool(billing)), 'Refund'))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(isOncelyError(stopped, 'APPROVAL_REQUIRED')).toBe(true);
    expect(asking.asked).toBe(2);
    expect(billing.credits).toHaveLength(1);
    const { key, repeatOf } = (stopped as { details: { key: string; repeatOf: string } }).details;
    expect(repeatOf).toBe(billing.credits[0]?.key);
    expect((await ledger.store.runs.getApproval('acme', key))?.repeatOf).toBe(repeatOf);

    const refusing = new ScriptedModel(script());
    const other = durableAgentRun({
      ledger,
      tenantId: 'acme',
      runId: 'agents-repeat-refuse',
      onRepeat: 'refuse',
    });
    const result = await other.run(() => runner.run(agentOf(other, refusing, creditTool(billing)), 'Refund'));
    expect(result.finalOutput).toBe('Done.');
    expect(billing.credits).toHaveLength(2); // one per run
    const outputs = (refusing.inputs[2] as unknown as { type?: string; output?: unknown }[])
      .filter((i) => i.type === 'function_call_result')
      .map((r) => JSON.stringify(r.output));
    expect(outputs[1]).toContain('repeat_refused');
    expect(outputs[1]).toContain(billing.credits[1]!.key);
  });

  it("maps an oncely approval to the SDK's interruption: nothing runs until an operator approves", async () => {
    const billing = new Billing();
    const tool = creditTool(billing, { approval: true });
    const model = new ScriptedModel([[creditCall('c', 2500)], [say('Credited.')]]);
    const run = durableAgentRun({ ledger, tenantId: 'acme', runId: 'agents-4' });
    const agent = agentOf(run, model, tool);
    const paused = await run.run(() => runner.run(agent, 'Refund'));
    expect(paused.interruptions).toHaveLength(1);
    expect(billing.credits).toHaveLength(0);
    const [steps] = [await run.steps()];
    const callId = (steps[0]?.response as { output: { callId: string }[] }).output[0]!.callId;
    const key = `agents-4:${callId}`;
    expect((await ledger.store.runs.getApproval('acme', key))?.status).toBe('pending');

    await decideToolApproval(ledger, 'approved', {
      tenantId: 'acme',
      idempotencyKey: key,
      actorId: 'ops-ana',
    });
    paused.state.approve(paused.interruptions[0]!);
    const done = await run.run(() => runner.run(agent, paused.state));
    expect(done.finalOutput).toBe('Credited.');
    expect(billing.credits.map((c) => c.key)).toEqual([key]);
    expect((await ledger.store.runs.getApproval('acme', key))?.status).toBe('consumed');
  });
});
