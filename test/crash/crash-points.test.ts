import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { isFinalRunStatus, type RunRecord } from '../../src/run-state/index.js';
import { waitFor } from '../support/processes.js';
import { STORE_KINDS } from '../support/stores.js';
import { useCrashHarness } from './harness.js';

/*
 * For each named crash point: an `oncely worker` process armed to SIGKILL itself there drives a run
 * whose one step credits an account (a billing API that honours the idempotency key) and charges
 * another (one that ignores keys but can be looked up: the reconcile path). A fresh worker process
 * recovers the run. The billing service, which outlives both processes, counts what took effect:
 * exactly one credit and one charge, however the first process died.
 */

const CONFIG = fileURLToPath(new URL('fixture/oncely.yaml', import.meta.url));
const LEASE_MS = 800;
const TENANT = 'acme';

interface Scenario {
  readonly point: string;
  /** Arrivals at the point to let pass before the kill (`ONCELY_CRASH_SKIP`). */
  readonly skip?: number;
  readonly what: string;
}

const SCENARIOS: Scenario[] = [
  { point: 'model.before-call', what: 'before the first model call' },
  { point: 'model.after-call', what: 'after the model answered, before its response is checkpointed' },
  { point: 'checkpoint.before-commit', what: 'before the checkpoint with the model response commits' },
  { point: 'tool.after-reserve', what: 'after the calls are reserved, before anything is sent' },
  { point: 'tool.before-execute', what: 'inside the attempt, before the tool runs' },
  { point: 'tool.after-effect', what: 'after an effect, before its outcome is recorded' },
  {
    point: 'checkpoint.before-commit',
    skip: 1,
    what: 'mid commit of the outcomes and the next checkpoint (rolled back)',
  },
  { point: 'tool.after-record', what: 'after the outcomes and checkpoint committed' },
];

describe.each(STORE_KINDS)('crash points on %s', (kind) => {
  const h = useCrashHarness(kind, CONFIG, LEASE_MS);

  const settled = (runId: string): Promise<RunRecord> =>
    waitFor(
      `run ${runId} to end`,
      async () => {
        const run = await h.opened.store.runs.get(TENANT, runId);
        return run !== undefined && (isFinalRunStatus(run.status) || run.status.startsWith('awaiting'))
          ? run
          : undefined;
      },
      30_000,
    );

  it.each(SCENARIOS)('killed at $point ($what): recovered, one effect per key', async (scenario) => {
    const { run } = await h.runtime.startRun({ tenantId: TENANT, agent: 'crash-agent', input: 'go' });

    const doomed = h.worker({
      ONCELY_CRASH_AT: scenario.point,
      ONCELY_CRASH_SKIP: String(scenario.skip ?? 0),
    });
    const death = await doomed.exit(30_000);
    expect(death, doomed.stderr).toEqual({ code: null, signal: 'SIGKILL' });
    expect(doomed.stderr).toContain(`crash point ${scenario.point} armed`);

    const rescuer = h.worker({ ONCELY_LOG_LEVEL: 'warn' });
    const final = await settled(run.runId);
    await rescuer.stopsCleanly();

    expect(final.status, JSON.stringify(final.error)).toBe('completed');
    expect(final.leaseEpoch).toBeGreaterThanOrEqual(2); // a fresh process took it over
    const records = await h.opened.store.ledger.list(TENANT, { runId: run.runId, limit: 10 });
    expect(records.map((r) => [r.toolName, r.status]).sort()).toEqual([
      ['charge_unkeyed', 'completed'],
      ['credit_keyed', 'completed'],
    ]);
    for (const record of records) {
      // The billing service's own count: one credit under the key, one charge under the reference.
      expect(h.billing.effectsFor(record.idempotencyKey), record.idempotencyKey).toBe(1);
      expect(h.billing.appliedFor(record.idempotencyKey)).toHaveLength(1);
    }
    const told = final.checkpoint.messages.filter((m) => (m as { role: string }).role === 'tool');
    expect(told).toHaveLength(1);
    expect(final.result).toEqual({ text: 'Both done.' });
  });
});
