import { MockLanguageModelV3 } from 'ai/test';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ApiMetrics } from '../../src/api/metrics.js';
import { defineAgent, openRuntime, type Runtime } from '../../src/index.js';
import { scriptedModel } from '../../src/models/index.js';
import type { RepeatInfo } from '../../src/runs/index.js';
import { defineTool, external } from '../../src/tools/index.js';
import { openTestStore, type OpenedStore } from '../support/stores.js';

describe('/metrics: the model calls of the runs a process drives', () => {
  let opened: OpenedStore;
  let runtime: Runtime;
  const metrics = new ApiMetrics({ defaultMetrics: false });
  beforeEach(async () => {
    opened = await openTestStore('sqlite', 'metrics-model');
    const model = new MockLanguageModelV3({
      modelId: 'gpt-4.1',
      doGenerate: {
        content: [{ type: 'text', text: 'Hello.' }],
        finishReason: { unified: 'stop', raw: 'stop' },
        usage: {
          inputTokens: { total: 120, noCache: 20, cacheRead: 100, cacheWrite: undefined },
          outputTokens: { total: 30, text: 18, reasoning: 12 },
        },
        response: { modelId: 'gpt-4.1-2025-04-14' },
        warnings: [],
      },
    });
    runtime = await openRuntime({
      store: opened.store,
      agents: [defineAgent({ name: 'greeter', instructions: 'Greet.', model, tools: [] })],
      onModelResponse: (response) => metrics.modelResponse(response),
    });
  });
  afterEach(async () => {
    await runtime.close();
    await opened.cleanup();
  });

  it('counts calls and tokens by agent, model and type', async () => {
    await runtime.run({ tenantId: 'acme', agent: 'greeter', input: 'hi' });
    await runtime.run({ tenantId: 'acme', agent: 'greeter', input: 'hello' });
    const text = await metrics.render(opened.store);
    const labels = 'agent="greeter",model="mock-provider/gpt-4.1-2025-04-14"';
    expect(text).toContain(`oncely_model_calls_total{${labels}} 2`);
    expect(text).toContain(`oncely_model_tokens_total{${labels},type="input"} 240`);
    expect(text).toContain(`oncely_model_tokens_total{${labels},type="output"} 60`);
    expect(text).toContain(`oncely_model_tokens_total{${labels},type="reasoning"} 24`);
    expect(text).toContain(`oncely_model_tokens_total{${labels},type="cached_input"} 200`);
  });
});

describe('/metrics: the repeats of the runs a process drives', () => {
  let opened: OpenedStore;
  const runtimes: Runtime[] = [];
  beforeEach(async () => {
    opened = await openTestStore('sqlite', 'metrics-repeats');
  });
  afterEach(async () => {
    for (const r of runtimes.splice(0)) await r.close();
    await opened.cleanup();
  });

  /** A runtime whose agent credits the same account twice, under `onRepeat`. */
  async function creditingTwice(
    onRepeat: 'ask' | 'refuse',
    observe: (info: RepeatInfo) => void,
  ): Promise<Runtime> {
    const input = { accountId: 'acct_1', amountCents: 2500 };
    const credit = defineTool({
      name: 'issue_credit',
      description: 'Credit an account',
      input: z.object({ accountId: z.string(), amountCents: z.number() }),
      effect: external(),
      execute: () => ({ receipt: 'cr_1' }),
    });
    const model = scriptedModel([
      { toolCalls: [{ toolName: 'issue_credit', input }] },
      { toolCalls: [{ toolName: 'issue_credit', input }] },
      { text: 'Done.' },
    ]);
    const agent = defineAgent({
      name: 'biller',
      instructions: 'Credit.',
      model,
      tools: [credit],
      toolPolicy: { onRepeat },
    });
    const runtime = await openRuntime({ store: opened.store, agents: [agent], onRepeat: observe });
    runtimes.push(runtime);
    return runtime;
  }

  it('counts each repeat by tool and decision: asked, then approved; refused', async () => {
    const metrics = new ApiMetrics({ defaultMetrics: false });
    const asking = await creditingTwice('ask', (info) => metrics.toolCallRepeat(info));
    const waiting = await asking.run({ tenantId: 'acme', agent: 'biller', input: 'credit' });
    expect(waiting.status).toBe('awaiting_approval');
    const series = (decision: string) =>
      `oncely_tool_call_repeats_total{tool="issue_credit",decision="${decision}"}`;
    let text = await metrics.render(opened.store);
    expect(text).toContain(`${series('ask')} 1`);
    expect(text).not.toContain(series('approved'));
    const [approval] = await opened.store.runs.approvalsOfRun('acme', waiting.runId);
    await asking.approve({ tenantId: 'acme', idempotencyKey: approval!.idempotencyKey, actorId: 'ops-ana' });
    expect((await asking.drive('acme', waiting.runId)).status).toBe('completed');
    text = await metrics.render(opened.store);
    expect(text).toContain(`${series('ask')} 1`);
    expect(text).toContain(`${series('approved')} 1`);

    const refusing = await creditingTwice('refuse', (info) => metrics.toolCallRepeat(info));
    expect((await refusing.run({ tenantId: 'acme', agent: 'biller', input: 'credit' })).status).toBe(
      'completed',
    );
    expect(await metrics.render(opened.store)).toContain(`${series('refuse')} 1`);
  });

  it("tells the observer once per repeat, with its tenant and agent; what it throws is not the run's", async () => {
    const heard: RepeatInfo[] = [];
    const runtime = await creditingTwice('refuse', (info) => {
      heard.push(info);
      throw new Error('observer down');
    });
    const run = await runtime.run({ tenantId: 'acme', agent: 'biller', input: 'credit' });
    expect(run.status).toBe('completed');
    expect(heard).toEqual([
      { tenantId: 'acme', agent: 'biller', toolName: 'issue_credit', decision: 'refuse' },
    ]);
  });
});
