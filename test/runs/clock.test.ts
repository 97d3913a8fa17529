import { setTimeout as realSleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod/v4';
import { defineAgent } from '../../src/agents/index.js';
import type { ToolExecutionRecord } from '../../src/ledger/index.js';
import { scriptedModel } from '../../src/models/index.js';
import { openRuntime, type Runtime } from '../../src/runs/index.js';
import { defineTool, write } from '../../src/tools/index.js';
import type { Clock, ClockTimer } from '../../src/util/clock.js';
import { startWorker } from '../../src/worker/index.js';
import { tempSqlitePath } from '../support/databases.js';

/*
 * The runtime and its SQLite store keep the time of the clock they are given: a virtual clock moves
 * only when the test advances it, so a tool call's timeout, a run's lease and its renewals, the
 * ledger's times and a worker's heartbeats all follow it, and real time passing changes nothing.
 */

const TENANT = 'acme';
const T0 = Date.parse('2030-01-01T00:00:00.000Z');
const at = (ms: number): string => new Date(T0 + ms).toISOString();

interface VirtualTimer extends ClockTimer {
  at: number;
  seq: number;
  readonly fn: () => void;
  readonly every: number | undefined;
}

/** A clock whose time moves only in `advance`, firing the timers due on the way in order. */
class VirtualClock implements Clock {
  #now: number;
  #seq = 0;
  readonly #timers = new Set<VirtualTimer>();

  constructor(start: number) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimeout(fn: () => void, ms: number): ClockTimer {
    return this.#add(fn, ms, undefined);
  }

  setInterval(fn: () => void, ms: number): ClockTimer {
    return this.#add(fn, ms, Math.max(1, ms));
  }

  clearTimeout(timer: ClockTimer | undefined): void {
    if (timer !== undefined) this.#timers.delete(timer as VirtualTimer);
  }

  clearInterval(timer: ClockTimer | undefined): void {
    this.clearTimeout(timer);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted === true) {
        reject(signal.reason as Error);
        return;
      }
      const onAbort = (): void => {
        this.clearTimeout(timer);
        reject(signal?.reason as Error);
      };
      const timer = this.setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  timeoutSignal(ms: number): AbortSignal {
    const controller = new AbortController();
    this.setTimeout(
      () => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')),
      ms,
    );
    return controller.signal;
  }

  /** Timers waiting, for the test to see that something waits on this clock. */
  get pending(): number {
    return this.#timers.size;
  }

  /** Moves time on by `ms`, firing every timer due by then in order, letting the work each starts run. */
  async advance(ms: number): Promise<void> {
    const until = this.#now + ms;
    for (;;) {
      await settleWork();
      const next = [...this.#timers]
        .filter((t) => t.at <= until)
        .sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (next === undefined) break;
      this.#now = next.at;
      if (next.every === undefined) this.#timers.delete(next);
      else {
        next.at += next.every;
        next.seq = ++this.#seq;
      }
      next.fn();
    }
    this.#now = until;
    await settleWork();
  }

  #add(fn: () => void, ms: number, every: number | undefined): VirtualTimer {
    const timer: VirtualTimer = {
      at: this.#now + Math.max(0, ms),
      seq: ++this.#seq,
      fn,
      every,
      unref: () => timer,
    };
    this.#timers.add(timer);
    return timer;
  }
}

/** Lets promise chains and the store's statements started by a timer run to their next wait. */
async function settleWork(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** Polls (in real time, bounded) until `check` holds. */
async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within 10 s`);
    await realSleep(10);
  }
}

describe('a runtime on a virtual clock', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function open(
    clock: VirtualClock,
    label: string,
  ): Promise<{ runtime: Runtime; executions: string[]; agent: string }> {
    const file = tempSqlitePath(label);
    cleanups.push(() => file.cleanup());
    const executions: string[] = [];
    const hang = defineTool({
      name: 'change_owner',
      description: "Change an account's owner",
      input: z.object({ accountId: z.string() }),
      effect: write(),
      timeoutMs: 100,
      // The downstream never answers, and the tool ignores its signal: only the timeout ends the wait.
      execute: async (_args, ctx) => {
        executions.push(ctx.idempotencyKey);
        await new Promise<never>(() => undefined);
        return null;
      },
    });
    const agent = defineAgent({
      name: label,
      instructions: 'You help with accounts.',
      model: scriptedModel(
        [{ toolCalls: [{ toolName: 'change_owner', input: { accountId: 'acct_7' } }] }, { text: 'Done.' }],
        { clock },
      ),
      tools: [hang],
      toolPolicy: { onIndeterminate: 'pause' },
    });
    // The runtime opens the store from the URL, with its own clock.
    const runtime = await openRuntime({
      databaseUrl: `sqlite:${file.path}`,
      agents: [agent],
      clock,
      owner: 'sim-1',
      leaseMs: 150,
      landingMarginMs: 0,
    });
    cleanups.push(async () => {
      // Its one late outcome never comes: closing waits for it up to its timeout, on the clock.
      const closing = runtime.close({ timeoutMs: 1_000 });
      await clock.advance(1_000);
      await closing;
    });
    return { runtime, executions, agent: label };
  }

  async function onlyRecord(runtime: Runtime, runId: string): Promise<ToolExecutionRecord> {
    const records = await runtime.store.ledger.list(TENANT, { runId, limit: 10 });
    expect(records).toHaveLength(1);
    return records[0]!;
  }

  it('times a tool call out, renews the lease and stamps the ledger by the virtual clock only', async () => {
    const clock = new VirtualClock(T0);
    const { runtime, executions, agent } = await open(clock, 'clock_run');
    const runId = 'run_clock_1';
    let ended = false;
    const driving = runtime.run({ tenantId: TENANT, agent, input: 'Give acct_7 to Bo', runId });
    driving.then(
      () => (ended = true),
      () => (ended = true),
    );
    await until(() => executions.length === 1, 'the tool starts');

    const reserved = await onlyRecord(runtime, runId);
    expect(reserved).toMatchObject({ status: 'started', createdAt: at(0), attemptStartedAt: at(0) });
    expect(await runtime.getRunSummary(TENANT, runId)).toMatchObject({
      status: 'running',
      leaseOwner: 'sim-1',
      leaseExpiresAt: at(150),
    });

    // Real time well past the tool's timeout and the lease: nothing happens.
    await realSleep(400);
    expect(ended).toBe(false);
    expect((await onlyRecord(runtime, runId)).status).toBe('started');
    expect((await runtime.getRunSummary(TENANT, runId)).leaseExpiresAt).toBe(at(150));

    // 60 virtual ms: the lease is renewed at 50 (a third of it), to 50 + 150; the call still runs.
    await clock.advance(60);
    expect((await runtime.getRunSummary(TENANT, runId)).leaseExpiresAt).toBe(at(200));
    expect((await onlyRecord(runtime, runId)).status).toBe('started');
    expect(ended).toBe(false);

    // At 100 virtual ms the attempt times out: unknown, and the run waits for a settlement.
    await clock.advance(40);
    await until(() => ended, 'the drive ends');
    const run = await driving;
    expect(run.status).toBe('awaiting_reconciliation');
    const unknown = await onlyRecord(runtime, runId);
    expect(unknown).toMatchObject({
      status: 'indeterminate',
      createdAt: at(0),
      attemptStartedAt: at(0),
      updatedAt: at(100),
      error: { code: 'TOOL_TIMEOUT' },
    });
    expect(executions).toHaveLength(1);
    const history = await runtime.store.ledger.history(TENANT, unknown.idempotencyKey);
    expect(history.map((e) => [e.to, e.at])).toEqual([
      ['started', at(0)],
      ['indeterminate', at(100)],
    ]);
    const events = await runtime.store.runs.events(TENANT, runId, 0, 100);
    expect(events.length).toBeGreaterThan(0);
    expect(events.every((e) => e.at >= at(0) && e.at <= at(100))).toBe(true);
  });

  it("runs a worker's polls and heartbeats on the virtual clock", async () => {
    const clock = new VirtualClock(T0 + 3_600_000);
    const { runtime } = await open(clock, 'clock_worker');
    const beats = async (): Promise<string[]> =>
      (await runtime.store.workers.list(TENANT, { liveMs: 15_000 })).map((w) => w.lastHeartbeatAt);
    const worker = startWorker(runtime, { heartbeatMs: 5_000, pollMs: 1_000, sweepMs: 2_000 });
    cleanups.push(() => worker.stop());
    await until(async () => (await beats()).length === 1, 'the first heartbeat');
    expect(await beats()).toEqual([at(3_600_000)]);
    // It naps on the clock: real time passing writes no other heartbeat.
    await until(() => clock.pending > 0, 'the worker naps');
    await realSleep(300);
    expect(await beats()).toEqual([at(3_600_000)]);
    await clock.advance(4_999);
    expect(await beats()).toEqual([at(3_600_000)]);
    await clock.advance(1);
    await until(async () => (await beats())[0] === at(3_605_000), 'the next heartbeat');
  });
});
