import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { RunRecord } from '../../src/run-state/index.js';
import { waitFor } from '../support/processes.js';
import { STORE_KINDS } from '../support/stores.js';
import { useCrashHarness, type CrashHarness } from './harness.js';

/*
 * A conversation of three turns, each with a keyed credit and an unkeyed charge, driven by real
 * `oncely worker` processes; the one driving the second turn SIGKILLs itself at a crash point and a
 * fresh process recovers the turn. The billing service, which outlives every process, counts one
 * effect per key across all three turns; the conversation holds each message once.
 */

const CONFIG = fileURLToPath(new URL('fixture/conversation.yaml', import.meta.url));
const LEASE_MS = 800;
const TENANT = 'acme';

/** Waits (30 s at most) until the run has answered turn `turn`. */
function answered(h: CrashHarness, runId: string, turn: number): Promise<RunRecord> {
  return waitFor(
    `run ${runId} to answer turn ${turn}`,
    async () => {
      const run = await h.opened.store.runs.get(TENANT, runId);
      if (run?.status === 'failed') throw new Error(`run failed: ${JSON.stringify(run.error)}`);
      return run?.status === 'completed' && run.turn === turn ? run : undefined;
    },
    30_000,
  );
}

const SCENARIOS = [
  // Turn 1 makes two model calls and two effects: the third arrival is turn 2's.
  { point: 'tool.after-effect', skip: 2, what: 'after an effect of turn 2, before its outcome is recorded' },
  {
    point: 'model.after-call',
    skip: 2,
    what: "after turn 2's model answered, before its response is durable",
  },
];

describe.each(STORE_KINDS)('a conversation whose worker dies mid-turn, on %s', (kind) => {
  const h = useCrashHarness(kind, CONFIG, LEASE_MS);

  it.each(SCENARIOS)('killed at $point ($what): three turns, one effect per key', async (scenario) => {
    const { run } = await h.runtime.startRun({ tenantId: TENANT, agent: 'chat', input: 'first' });
    const doomed = h.worker({ ONCELY_CRASH_AT: scenario.point, ONCELY_CRASH_SKIP: String(scenario.skip) });
    await answered(h, run.runId, 1);
    await h.runtime.send({ tenantId: TENANT, runId: run.runId, content: 'second', clientMessageId: 'm-2' });
    const death = await doomed.exit(30_000);
    expect(death, doomed.stderr).toEqual({ code: null, signal: 'SIGKILL' });

    const rescuer = h.worker({ ONCELY_LOG_LEVEL: 'warn' });
    const second = await answered(h, run.runId, 2);
    expect(second.result).toEqual({ text: 'Second done.' });
    // The message sent again after the crash (the client did not hear back) is the same turn.
    const again = await h.runtime.send({
      tenantId: TENANT,
      runId: run.runId,
      content: 'second',
      clientMessageId: 'm-2',
    });
    expect(again.sent).toBe(false);
    await h.runtime.send({ tenantId: TENANT, runId: run.runId, content: 'third', clientMessageId: 'm-3' });
    const final = await answered(h, run.runId, 3);
    await rescuer.stopsCleanly();

    expect(final.result).toEqual({ text: 'Third done.' });
    expect(final.leaseEpoch).toBeGreaterThanOrEqual(3);
    const users = final.checkpoint.messages.filter((m) => (m as { role: string }).role === 'user');
    expect(users.map((m) => (m as { content: string }).content)).toEqual(['first', 'second', 'third']);
    const records = await h.opened.store.ledger.list(TENANT, { runId: run.runId, limit: 20 });
    expect(records).toHaveLength(6);
    expect(records.every((r) => r.status === 'completed')).toBe(true);
    expect(records.every((r) => r.idempotencyKey.startsWith(`${run.runId}:call_`))).toBe(true);
    for (const record of records) {
      expect(h.billing.effectsFor(record.idempotencyKey), record.idempotencyKey).toBe(1);
      expect(h.billing.appliedFor(record.idempotencyKey)).toHaveLength(1);
    }
    const amounts = records.map((r) => (r.args as { amountCents: number }).amountCents).sort((a, b) => a - b);
    expect(amounts).toEqual([10, 20, 30, 100, 200, 300]);
  });
});
