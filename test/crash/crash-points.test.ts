import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.js';
import { isFinalRunStatus, type RunRecord } from '../../src/run-state/index.js';
import { openRuntime, type Runtime } from '../../src/runs/index.js';
import { openStore, type Store } from '../../src/store/index.js';
import { BillingService } from '../../src/demo/billing-service.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';
import { OncelyProcess, waitFor } from '../support/processes.js';

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

type Opened = { url: string; store: Store; cleanup(): Promise<void> };

const STORES: [string, () => Promise<Opened>][] = [
  [
    'sqlite',
    async () => {
      const file = tempSqlitePath('crash');
      const url = `sqlite:${file.path}`;
      const store = await openStore(url, { migrate: true });
      return { url, store, cleanup: async () => (await store.close(), file.cleanup()) };
    },
  ],
  [
    'postgres',
    async () => {
      const db = await createTestDatabase('crash');
      const store = await openStore(db.url, { migrate: true });
      return { url: db.url, store, cleanup: async () => (await store.close(), await db.drop()) };
    },
  ],
];

describe.each(STORES)('crash points on %s', (_name, open) => {
  let opened: Opened;
  let runtime: Runtime;
  let billing: BillingService;
  const processes: OncelyProcess[] = [];

  beforeAll(async () => {
    opened = await open();
    billing = await BillingService.start();
    const config = await loadConfig(CONFIG, { env: {} });
    runtime = await openRuntime({ store: opened.store, agents: [...config.agents.values()] });
  });

  afterAll(async () => {
    await Promise.all(processes.map((p) => p.kill()));
    await runtime.close();
    await billing.close();
    await opened.cleanup();
  });

  const worker = (env: Record<string, string> = {}): OncelyProcess => {
    const p = new OncelyProcess(
      [
        'worker',
        '-c',
        CONFIG,
        '--database-url',
        opened.url,
        '--lease-ms',
        String(LEASE_MS),
        '--poll-ms',
        '50',
      ],
      { BILLING_URL: billing.url, ONCELY_LOG_LEVEL: 'warn', ...env },
    );
    processes.push(p);
    return p;
  };

  const settled = (runId: string): Promise<RunRecord> =>
    waitFor(
      `run ${runId} to end`,
      async () => {
        const run = await opened.store.runs.get(TENANT, runId);
        return run !== undefined && (isFinalRunStatus(run.status) || run.status.startsWith('awaiting'))
          ? run
          : undefined;
      },
      30_000,
    );

  it.each(SCENARIOS)('killed at $point ($what): recovered, one effect per key', async (scenario) => {
    const { run } = await runtime.startRun({ tenantId: TENANT, agent: 'crash-agent', input: 'go' });

    const doomed = worker({
      ONCELY_CRASH_AT: scenario.point,
      ONCELY_CRASH_SKIP: String(scenario.skip ?? 0),
    });
    const death = await doomed.exit(30_000);
    expect(death, doomed.stderr).toEqual({ code: null, signal: 'SIGKILL' });
    expect(doomed.stderr).toContain(`crash point ${scenario.point} armed`);

    const rescuer = worker();
    const final = await settled(run.runId);
    expect(await rescuer.stop()).toEqual({ code: 0, signal: null });

    expect(final.status, JSON.stringify(final.error)).toBe('completed');
    expect(final.leaseEpoch).toBeGreaterThanOrEqual(2); // a fresh process took it over
    const records = await opened.store.ledger.list(TENANT, { runId: run.runId, limit: 10 });
    expect(records.map((r) => [r.toolName, r.status]).sort()).toEqual([
      ['charge_unkeyed', 'completed'],
      ['credit_keyed', 'completed'],
    ]);
    for (const record of records) {
      // The billing service's own count: one credit under the key, one charge under the reference.
      expect(billing.effectsFor(record.idempotencyKey), record.idempotencyKey).toBe(1);
      expect(billing.appliedFor(record.idempotencyKey)).toHaveLength(1);
    }
    const told = final.checkpoint.messages.filter((m) => (m as { role: string }).role === 'tool');
    expect(told).toHaveLength(1);
    expect(final.result).toEqual({ text: 'Both done.' });
  });
});
