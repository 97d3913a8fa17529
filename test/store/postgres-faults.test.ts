import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineAgent } from '../../src/agents/index.js';
import { Ledger, executeToolCall } from '../../src/calls/index.js';
import { scriptedModel } from '../../src/models/index.js';
import { Runtime } from '../../src/runs/index.js';
import { openStore, timeoutsFromEnv, type Store } from '../../src/store/index.js';
import { defineTool, external } from '../../src/tools/index.js';
import { realClock, type Clock } from '../../src/util/clock.js';
import { createTestDatabase } from '../support/databases.js';

/*
 * PostgreSQL under faults, for real: the pool's lock and idle-in-transaction timeouts bite (a process
 * that freezes inside a transaction cannot hold its row locks for as long as it is frozen), a
 * statement that met a lock timeout is repeated once the lock is free, and when a step's commit fails
 * the outcomes the driver holds are recorded on their own instead of being left unknown.
 */

const TENANT = 'acme';

describe('PostgreSQL under faults', () => {
  let db: { url: string; drop(): Promise<void> };
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    db = await createTestDatabase('pg_faults');
    const migrated = await openStore(db.url, { migrate: true });
    await migrated.close();
  });
  afterEach(async () => {
    for (const close of closers.splice(0).reverse()) await close();
  });
  afterAll(() => db.drop());

  const storeWith = async (
    timeouts: { lockMs?: number; idleInTransactionMs?: number },
    clock?: Clock,
  ): Promise<Store> => {
    const store = await openStore(db.url, {
      postgresTimeouts: timeouts,
      ...(clock === undefined ? {} : { clock }),
    });
    closers.push(() => store.close());
    return store;
  };

  /** A raw connection that locks one run's row until `release()`. */
  async function lockRun(runId: string): Promise<{ release(): Promise<void> }> {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query('BEGIN');
    await client.query('SELECT 1 FROM runs WHERE tenant_id = $1 AND run_id = $2 FOR UPDATE', [TENANT, runId]);
    let released = false;
    const release = async (): Promise<void> => {
      if (released) return;
      released = true;
      await client.query('COMMIT');
      await client.end();
    };
    closers.push(release);
    return { release };
  }

  const newRun = async (store: Store, runId: string): Promise<void> => {
    await store.runs.create({
      tenantId: TENANT,
      runId,
      agent: 'faults',
      input: 'x',
      checkpoint: { messages: [], step: 0, pending: null },
    });
  };

  it('prepares its hot statements anew when a column is added under them, instead of failing every call', async () => {
    const store = await storeWith({});
    const ledger = new Ledger(store, { actorId: 'faults' });
    const tool = defineTool({
      name: 'prepared_effect',
      description: 'keyed no-op',
      input: z.object({ n: z.number() }),
      effect: external(),
      execute: (args) => args,
    });
    const call = (n: number) => ({ tenantId: TENANT, runId: 'run_prepared', toolCallId: `c${n}` });
    // One connection, so the second call reuses the statements the first prepared.
    for (let n = 0; n < 3; n++) {
      expect((await executeToolCall(ledger, tool, { n }, call(n))).status).toBe('completed');
    }
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      await admin.query('ALTER TABLE tool_executions ADD COLUMN added_by_hand integer');
      for (let n = 3; n < 6; n++) {
        expect((await executeToolCall(ledger, tool, { n }, call(n))).status).toBe('completed');
      }
      const replayed = await executeToolCall(ledger, tool, { n: 0 }, call(0));
      expect(replayed).toMatchObject({ status: 'completed', replayed: true });
    } finally {
      await admin.query('ALTER TABLE tool_executions DROP COLUMN IF EXISTS added_by_hand');
      await admin.end();
    }
    const records = await store.ledger.list(TENANT, { runId: 'run_prepared', limit: 10 });
    expect(records.map((r) => r.status)).toEqual(Array(6).fill('completed'));
  });

  it('gives up on a row lock after lock_timeout instead of waiting as long as its holder is frozen', async () => {
    const store = await storeWith({ lockMs: 150 });
    await newRun(store, 'run_locked');
    const lock = await lockRun('run_locked');
    const started = Date.now();
    await expect(store.runs.claim(TENANT, 'run_locked', 'w1', 1_000)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      details: { postgres: '55P03' },
    });
    // Three tries of 150 ms and the pauses between them: well under a second, not forever.
    expect(Date.now() - started).toBeLessThan(3_000);
    await lock.release();
    expect(await store.runs.claim(TENANT, 'run_locked', 'w1', 1_000)).toMatchObject({ status: 'running' });
  });

  it('pauses between the tries of a statement on the clock it was given', async () => {
    const pauses: number[] = [];
    const clock: Clock = {
      ...realClock,
      sleep: (ms, signal) => {
        pauses.push(ms);
        return realClock.sleep(ms, signal);
      },
    };
    const store = await storeWith({ lockMs: 100 }, clock);
    await newRun(store, 'run_clocked');
    const lock = await lockRun('run_clocked');
    await expect(store.runs.claim(TENANT, 'run_clocked', 'w1', 1_000)).rejects.toMatchObject({
      details: { postgres: '55P03' },
    });
    await lock.release();
    // Three tries, two pauses between them, each 5 ms and a jitter that grows with the try.
    expect(pauses).toHaveLength(2);
    expect(pauses[0]).toBeGreaterThanOrEqual(5);
    expect(pauses[0]).toBeLessThan(25);
    expect(pauses[1]).toBeLessThan(45);
  });

  it('repeats a statement the server rolled back on a lock timeout, and it succeeds once the lock is free', async () => {
    const store = await storeWith({ lockMs: 200 });
    await newRun(store, 'run_briefly_locked');
    const lock = await lockRun('run_briefly_locked');
    setTimeout(() => void lock.release(), 300);
    const claimed = await store.runs.claim(TENANT, 'run_briefly_locked', 'w1', 1_000);
    expect(claimed).toMatchObject({ status: 'running', leaseOwner: 'w1', leaseEpoch: 1 });
    const claims = (await store.runs.events(TENANT, 'run_briefly_locked', 0, 10)).filter(
      (e) => e.type === 'run.claimed',
    );
    expect(claims).toHaveLength(1);
  });

  it('ends a connection left idle inside a transaction (a frozen process), releasing its locks', async () => {
    const frozen = await storeWith({ idleInTransactionMs: 200 });
    const other = await storeWith({ lockMs: 5_000 });
    await newRun(frozen, 'run_frozen_tx');
    const holding = frozen.transaction(async (tx) => {
      await tx.runs.claim(TENANT, 'run_frozen_tx', 'frozen', 60_000); // takes the row lock
      await sleep(1_000); // frozen mid-transaction
    });
    await sleep(50);
    const started = Date.now();
    // The server ends the idle transaction; its claim rolls back; the lock is free well before 1 s.
    const claimed = await other.runs.claim(TENANT, 'run_frozen_tx', 'other', 60_000);
    expect(Date.now() - started).toBeLessThan(900);
    expect(claimed).toMatchObject({ leaseOwner: 'other', leaseEpoch: 1 });
    await expect(holding).rejects.toThrow();
  });

  it('reads the timeouts from the environment and refuses a value that is not one', () => {
    expect(
      timeoutsFromEnv({
        ONCELY_PG_STATEMENT_TIMEOUT_MS: '5000',
        ONCELY_PG_LOCK_TIMEOUT_MS: '0',
        ONCELY_PG_IDLE_IN_TRANSACTION_TIMEOUT_MS: ' ',
      }),
    ).toEqual({ statementMs: 5000, lockMs: 0 });
    expect(() => timeoutsFromEnv({ ONCELY_PG_LOCK_TIMEOUT_MS: '10s' })).toThrow(
      /ONCELY_PG_LOCK_TIMEOUT_MS="10s"/,
    );
  });

  it('records the outcome in hand when the step’s commit fails, instead of leaving the call started', async () => {
    const store = await storeWith({ lockMs: 150 });
    let lock: { release(): Promise<void> } | undefined;
    let runId = '';
    let executions = 0;
    const credit = defineTool({
      name: 'issue_credit',
      description: 'Credit an account',
      input: z.object({ accountId: z.string() }),
      effect: external(),
      async execute() {
        executions += 1;
        // While the credit is made, something else locks the run's row past the step's commit.
        lock = await lockRun(runId);
        return { creditId: 'cr_1' };
      },
    });
    const agent = defineAgent({
      name: 'faults',
      instructions: 'Credit.',
      model: scriptedModel([
        { toolCalls: [{ toolName: 'issue_credit', input: { accountId: 'a' } }] },
        { text: 'Done.' },
      ]),
      tools: [credit],
    });
    const runtime = new Runtime(store, {
      agents: [agent],
      owner: 'faults-1',
      leaseMs: 2_000,
      retryBaseMs: 10,
    });
    closers.push(() => runtime.close());
    const { run } = await runtime.startRun({
      tenantId: TENANT,
      agent: 'faults',
      input: 'go',
      runId: 'run_commit_fails',
    });
    runId = run.runId;

    await expect(runtime.drive(TENANT, runId)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
      details: { postgres: '55P03' },
    });
    const [record] = await store.ledger.list(TENANT, { runId, limit: 5 });
    expect(record).toMatchObject({ status: 'completed', result: { creditId: 'cr_1' } });

    await lock?.release();
    await sleep(2_100); // the failed drive's lease runs out (it could not let the locked run go)
    const done = await runtime.drive(TENANT, runId);
    expect(done).toMatchObject({ status: 'completed', result: { text: 'Done.' } });
    expect(executions).toBe(1);
  });
});
