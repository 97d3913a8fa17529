import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { loadConfig } from '../../src/config/index.js';
import { BillingService } from '../../src/demo/billing-service.js';
import { openRuntime, type Runtime } from '../../src/runs/index.js';
import { OncelyProcess, waitFor } from '../support/processes.js';
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
  /**
   * Waits (20 s at most) until a worker's tool has begun executing the call of this key (the
   * fixture's tools leave a mark): past its reservation, its request on its way.
   */
  executionStarted(key: string): Promise<void>;
  /**
   * SIGSTOPs the process at a moment it holds no write transaction of the store: a process frozen
   * inside one stops every other writer until it thaws, which is another scenario than a frozen
   * driver. Thaws and tries again a few milliseconds later while it does (50 tries at most).
   */
  freeze(proc: OncelyProcess): Promise<void>;
}

/**
 * Whether a connection holds a transaction open on the store: on SQLite, the write lock; on
 * PostgreSQL, a session idle in a transaction (its client between statements; a single statement
 * finishes on the server whether or not its client is frozen).
 */
async function writeTransactionOpen(url: string): Promise<boolean> {
  if (url.startsWith('sqlite:')) {
    const db = new Database(url.slice('sqlite:'.length), { timeout: 0 });
    try {
      db.exec('BEGIN IMMEDIATE');
      db.exec('ROLLBACK');
      return false;
    } catch (error) {
      if ((error as { code?: string }).code === 'SQLITE_BUSY') return true;
      throw error;
    } finally {
      db.close();
    }
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ open: number }>(
      `SELECT count(*)::int AS open FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
          AND state LIKE 'idle in transaction%'`,
    );
    return (rows[0]?.open ?? 0) > 0;
  } finally {
    await client.end();
  }
}

/** The crash fixture's tool timeout in worker processes: long enough for loopback, short to wait out. */
export const TOOL_TIMEOUT_MS = 1_500;

export function useCrashHarness(kind: StoreKind, config: string, leaseMs: number): CrashHarness {
  const processes: OncelyProcess[] = [];
  const marks = mkdtempSync(join(tmpdir(), 'oncely-crash-marks-'));
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
    rmSync(marks, { recursive: true, force: true });
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
        MARK_DIR: marks,
        ...env,
      });
      processes.push(p);
      return p;
    },
    async freeze(proc) {
      for (let tries = 0; tries < 50; tries += 1) {
        proc.child.kill('SIGSTOP');
        if (!(await writeTransactionOpen(harness.opened.url))) return;
        proc.child.kill('SIGCONT');
        await sleep(5);
      }
      throw new Error('the process held a write transaction each time it was frozen (50 tries)');
    },
    async executionStarted(key) {
      const mark = join(marks, encodeURIComponent(key));
      await waitFor(
        `the execution of ${key} to begin`,
        () => Promise.resolve(existsSync(mark) || undefined),
        20_000,
        5,
      );
    },
  };
}
