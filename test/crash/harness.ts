import { afterAll, beforeAll } from 'vitest';
import { loadConfig } from '../../src/config/index.js';
import { BillingService } from '../../src/demo/billing-service.js';
import { openRuntime, type Runtime } from '../../src/runs/index.js';
import { OncelyProcess } from '../support/processes.js';
import { openTestStore, type OpenedStore, type StoreKind } from '../support/stores.js';

/**
 * What a crash test needs around its worker processes: a store of its own, the billing service that
 * outlives every process, a runtime in the test process to start runs, and `worker()` to spawn an
 * `oncely worker` on the fixture configuration. Everything is closed (and every process killed) after.
 */
export interface CrashHarness {
  readonly opened: OpenedStore;
  readonly runtime: Runtime;
  readonly billing: BillingService;
  worker(env?: Record<string, string>): OncelyProcess;
}

/** The crash fixture's tool timeout in worker processes: long enough for loopback, short to wait out. */
export const TOOL_TIMEOUT_MS = 1_500;

export function useCrashHarness(kind: StoreKind, config: string, leaseMs: number): CrashHarness {
  const processes: OncelyProcess[] = [];
  const harness = {} as { opened: OpenedStore; runtime: Runtime; billing: BillingService };
  beforeAll(async () => {
    harness.opened = await openTestStore(kind, 'crash');
    harness.billing = await BillingService.start();
    const loaded = await loadConfig(config, { env: {} });
    harness.runtime = await openRuntime({ store: harness.opened.store, agents: [...loaded.agents.values()] });
  });
  afterAll(async () => {
    await Promise.all(processes.map((p) => p.kill()));
    await harness.runtime.close();
    await harness.billing.close();
    await harness.opened.cleanup();
  });
  return {
    get opened() {
      return harness.opened;
    },
    get runtime() {
      return harness.runtime;
    },
    get billing() {
      return harness.billing;
    },
    worker(env = {}) {
      const args = ['worker', '-c', config, '--database-url', harness.opened.url];
      const p = new OncelyProcess([...args, '--lease-ms', String(leaseMs), '--poll-ms', '50'], {
        BILLING_URL: harness.billing.url,
        TOOL_TIMEOUT_MS: String(TOOL_TIMEOUT_MS),
        ...env,
      });
      processes.push(p);
      return p;
    },
  };
}
