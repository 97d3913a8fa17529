import { setTimeout as sleep } from 'node:timers/promises';
import type {
  LanguageModelV3,
  LanguageModelV3CallOptions,
  LanguageModelV3GenerateResult,
} from '@ai-sdk/provider';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent } from '../../src/agents/index.js';
import { scriptedModel, type Script } from '../../src/models/index.js';
import type { RunRecord } from '../../src/run-state/index.js';
import type { Runtime } from '../../src/runs/index.js';
import type { Store } from '../../src/store/index.js';
import { defineTool, external, type Tool } from '../../src/tools/index.js';
import { OPERATOR, Runtimes, STORES, TENANT, codeOf, newRunId, type OpenedStore } from './fixtures.js';
import { CREDIT, FakeDownstream, issueCredit } from './tools.js';

/*
 * The promise at its edges, at the level of runs: a run whose drives keep failing ends failed
 * instead of being claimed forever; a model outage or a hung provider is waited out with backoff,
 * never a final failure while the budget lasts; an operator can re-drive a failed run from its
 * checkpoint without anything running twice; and a run's event stream, paged by its own sequence,
 * never skips an event that commits late.
 */

type Plan = ('down' | 'hang' | 'deaf' | 'ok')[];

/** A scripted model behind a provider that is down ('down': fetch fails), hangs, or answers, in turn. */
function flakyModel(script: Script, plan: Plan): LanguageModelV3 & { calls: number } {
  const inner = scriptedModel(script);
  const model = {
    specificationVersion: 'v3' as const,
    provider: 'flaky',
    modelId: 'flaky-1',
    supportedUrls: {},
    calls: 0,
    async doGenerate(options: LanguageModelV3CallOptions): Promise<LanguageModelV3GenerateResult> {
      model.calls += 1;
      const next = plan.shift() ?? 'ok';
      if (next === 'down') throw new TypeError('fetch failed');
      // A provider (or a middleware) that ignores its abort signal: it never answers at all.
      if (next === 'deaf') return new Promise<never>(() => undefined);
      if (next === 'hang') {
        return new Promise((_, reject) =>
          options.abortSignal?.addEventListener('abort', () => reject(new Error('aborted')), { once: true }),
        );
      }
      return inner.doGenerate(options);
    },
    doStream: (options: LanguageModelV3CallOptions) => inner.doStream(options),
  };
  return model;
}

/** Claims and drives every free run until `done` says so or the rounds run out (each round bounded). */
async function driveUntil(
  runtime: Runtime,
  runId: string,
  done: (run: RunRecord) => boolean,
  rounds = 40,
): Promise<RunRecord> {
  for (let i = 0; i < rounds; i++) {
    await runtime.recover().catch(() => undefined);
    const run = await runtime.getRun(TENANT, runId);
    if (done(run)) return run;
    await sleep(25);
  }
  return runtime.getRun(TENANT, runId);
}

/** The reasons of the run's releases for a model outage, in order. */
async function outageReasons(store: Store, runId: string): Promise<string[]> {
  const events = await store.runs.events(TENANT, runId, 0, 500);
  return events
    .map((e) => e.data as { status?: string; cause?: string; reason?: string })
    .filter((d) => d.status === 'queued' && d.cause === 'model_outage')
    .map((d) => d.reason ?? '');
}

const isFinal = (run: RunRecord): boolean => ['completed', 'failed', 'cancelled'].includes(run.status);

describe.each(STORES)('the promise at its edges, runs on %s', (_name, open) => {
  let opened: OpenedStore;
  let store: Store;
  const runtimes = new Runtimes();
  let seq = 0;

  beforeAll(async () => {
    opened = await open('runs_edges');
    store = opened.store;
  });
  afterEach(() => runtimes.closeAll());
  afterAll(() => opened.cleanup());

  const agentWith = (model: LanguageModelV3, tools: readonly Tool[], extra: Record<string, unknown> = {}) =>
    defineAgent({
      name: `edges_${++seq}`,
      instructions: 'You help with billing.',
      model,
      tools,
      ...extra,
    });

  it('ends a run whose every drive throws failed with RUN_RETRIES_EXCEEDED and the last error, instead of claiming it forever', async () => {
    const poison = defineTool({
      name: 'issue_credit',
      description: 'Credit an account',
      // A schema whose own code throws: every drive fails the same way, at the same place.
      input: z.object({ accountId: z.string() }).superRefine(() => {
        throw new Error('the schema itself is broken');
      }),
      effect: external(),
      execute: () => ({ credited: true }),
    });
    const agent = agentWith(
      scriptedModel([{ toolCalls: [{ toolName: 'issue_credit', input: { accountId: 'a' } }] }]),
      [poison],
    );
    const runtime = runtimes.open(store, [agent], { maxDriveAttempts: 3, retryBaseMs: 10 });
    const { run } = await runtime.startRun({
      tenantId: TENANT,
      agent: agent.name,
      input: 'go',
      runId: newRunId(),
    });

    const failed = await driveUntil(runtime, run.runId, isFinal);
    expect(failed).toMatchObject({ status: 'failed', error: { code: 'RUN_RETRIES_EXCEEDED' } });
    expect(failed.error?.message).toMatch(/driven 3 times .*the last error: the schema itself is broken/);
    const claims = (await store.runs.events(TENANT, run.runId, 0, 100)).filter(
      (e) => e.type === 'run.claimed',
    );
    expect(claims).toHaveLength(4); // three failed drives, and the claim that ended it
    expect(await store.ledger.list(TENANT, { runId: run.runId, limit: 10 })).toEqual([]);
    // Nothing claims it again.
    expect(await runtime.recover()).toEqual([]);
  });

  it('waits out a model outage with backoff (the run is queued, not failed) and completes once the provider is back', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const model = flakyModel(
      [{ toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] }, { text: 'Credited.' }],
      ['down', 'down', 'ok', 'down', 'ok'],
    );
    const agent = agentWith(model, [credit.tool]);
    const runtime = runtimes.open(store, [agent], { retryBaseMs: 10 });
    const { run } = await runtime.startRun({
      tenantId: TENANT,
      agent: agent.name,
      input: 'Credit it.',
      runId: newRunId(),
    });

    const done = await driveUntil(runtime, run.runId, isFinal);
    expect(done).toMatchObject({
      status: 'completed',
      result: { text: 'Credited.' },
      modelOutages: 0,
      lastError: { code: 'MODEL_CALL_FAILED' },
    });
    expect(model.calls).toBe(5);
    expect(credit.executions).toHaveLength(1);
    // Each outage let the run go (queued, with backoff), counted in a row until the model answered.
    const outages = await outageReasons(store, run.runId);
    expect(outages).toHaveLength(3);
    expect(outages[0]).toMatch(/the model is unavailable \(1 of 8 waits\)/);
    expect(outages[1]).toMatch(/\(2 of 8 waits\)/);
    expect(outages[2]).toMatch(/\(1 of 8 waits\)/); // the model answered in between
  });

  // 'deaf' ignores its abort signal (found by the simulator): the call must still be given up.
  it.each([
    ['hang', 'times out a hung provider and waits it out like an outage'],
    ['deaf', 'times out a hung provider that ignores its abort signal: the run is let go, not held for ever'],
  ] as const)('%s: %s', async (hang, _title) => {
    const model = flakyModel([{ text: 'Hello.' }], [hang, 'ok']);
    const agent = agentWith(model, [], { modelTimeoutMs: 100 });
    const runtime = runtimes.open(store, [agent], { retryBaseMs: 10 });
    const { run } = await runtime.startRun({
      tenantId: TENANT,
      agent: agent.name,
      input: 'Hi.',
      runId: newRunId(),
    });
    const started = Date.now();
    const done = await driveUntil(runtime, run.runId, isFinal);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(done.status).toBe('completed');
    expect(model.calls).toBe(2);
    expect(done.lastError?.message).toMatch(/no answer within 100 ms/);
    expect(await outageReasons(store, run.runId)).toHaveLength(1);
  });

  it('fails a run once the outage outlasts its budget, and `retry` re-drives it from its checkpoint: the credit is not made twice', async () => {
    const downstream = new FakeDownstream();
    const credit = issueCredit(downstream);
    const model = flakyModel(
      [{ toolCalls: [{ toolName: 'issue_credit', input: CREDIT }] }, { text: 'Credited.' }],
      ['ok', 'down', 'down', 'down'],
    );
    const agent = agentWith(model, [credit.tool], { modelOutageRetries: 2 });
    const runtime = runtimes.open(store, [agent], { retryBaseMs: 10 });
    const { run } = await runtime.startRun({
      tenantId: TENANT,
      agent: agent.name,
      input: 'Credit it.',
      runId: newRunId(),
    });

    const failed = await driveUntil(runtime, run.runId, isFinal);
    expect(failed).toMatchObject({ status: 'failed', error: { code: 'MODEL_CALL_FAILED' } });
    expect(failed.error?.message).toMatch(/unavailable 3 times in a row .*oncely runs retry/);
    expect(credit.executions).toHaveLength(1);

    expect(await codeOf(() => runtime.retry(TENANT, run.runId, { reason: '', actorId: OPERATOR }))).toBe(
      'LEDGER_REASON_REQUIRED',
    );
    const retried = await runtime.retry(TENANT, run.runId, {
      reason: 'the provider is back',
      actorId: OPERATOR,
    });
    expect(retried).toMatchObject({ status: 'queued', error: null, driveAttempts: 0, modelOutages: 0 });
    expect(await driveUntil(runtime, run.runId, isFinal)).toMatchObject({
      status: 'completed',
      result: { text: 'Credited.' },
    });
    expect(credit.executions).toHaveLength(1);
    expect(downstream.effects()).toEqual({ [credit.executions[0] ?? '']: 1 });
    expect(await codeOf(() => runtime.retry(TENANT, run.runId, { reason: 'again', actorId: OPERATOR }))).toBe(
      'RUN_NOT_RETRYABLE',
    );
  });

  it('pages a run’s events by its own sequence: an event that commits late is never skipped by a reader', async () => {
    const agent = agentWith(scriptedModel([{ text: 'unused' }]), []);
    const runtime = runtimes.open(store, [agent]);
    const { run } = await runtime.startRun({
      tenantId: TENANT,
      agent: agent.name,
      input: 'x',
      runId: newRunId(),
    });
    const seen: number[] = [];
    let last = 0;
    const read = async (): Promise<void> => {
      for (const e of await store.runs.events(TENANT, run.runId, last, 100)) {
        seen.push(e.seq);
        last = e.seq;
      }
    };
    await read();
    // A writer that appends an event and holds its transaction open, and one that appends after it.
    const slow = store.transaction(async (tx) => {
      await tx.runs.appendEvent(TENANT, run.runId, 'test.slow', { n: 1 });
      await sleep(300);
    });
    await sleep(50);
    const fast = store.runs.appendEvent(TENANT, run.runId, 'test.fast', { n: 2 });
    await sleep(100);
    await read(); // while the slow one has not committed
    await Promise.all([slow, fast]);
    await read();
    const all = await store.runs.events(TENANT, run.runId, 0, 100);
    expect(all.map((e) => e.seq)).toEqual(all.map((_, i) => i + 1));
    expect(seen).toEqual(all.map((e) => e.seq));
    expect(all.slice(-2).map((e) => e.type)).toEqual(['test.slow', 'test.fast']);
  });
});
