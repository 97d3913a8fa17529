import { MockLanguageModelV3 } from 'ai/test';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ApiMetrics } from '../../src/api/metrics.js';
import { defineAgent, openRuntime, type Runtime } from '../../src/index.js';
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
