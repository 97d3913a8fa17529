import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { initialMessages } from '../../src/runs/messages.js';
import { openStore, type Store } from '../../src/store/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';
import { OncelyProcess, waitFor } from '../support/processes.js';
import { Billing } from './billing.js';

/*
 * A cluster-wide tool limit under real worker processes: three workers (each driving up to four runs
 * at once) charge orders through a billing service that records how many requests it has in flight;
 * the tool is limited to 2 (`tool_concurrency` in the fixture). One worker is SIGKILLed while its
 * request is in flight: its slot comes back when its lease expires, its run is taken over and its
 * charge found by the reconcile hook. The billing service's books and the ledger are checked apart.
 */

const LIMIT = 2;
const RUNS = 10;
const TENANT = 'acme';
const config = fileURLToPath(new URL('fixture/limited.yaml', import.meta.url));

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (let job = cleanups.pop(); job !== undefined; job = cleanups.pop()) await job();
});

async function database(kind: 'sqlite' | 'postgres'): Promise<string> {
  if (kind === 'sqlite') {
    const file = tempSqlitePath('tool_limit');
    cleanups.push(() => file.cleanup());
    return `sqlite:${file.path}`;
  }
  const db = await createTestDatabase('tool_limit');
  cleanups.push(() => db.drop());
  return db.url;
}

describe.each(['sqlite', 'postgres'] as const)('a tool limited cluster-wide, on %s', (kind) => {
  it('three workers never have more than its limit in flight; a killed holder’s slot comes back', async () => {
    const url = await database(kind);
    const store: Store = await openStore(url, { migrate: true });
    cleanups.push(() => store.close());
    for (let i = 0; i < RUNS; i++) {
      await store.runs.create({
        tenantId: TENANT,
        runId: `charge_${i}`,
        agent: 'charger',
        input: 'go',
        checkpoint: { messages: initialMessages('go'), step: 0, pending: null },
      });
    }
    const billing = new Billing();
    const billingUrl = await billing.start();
    cleanups.push(() => billing.stop());
    const workers = Array.from({ length: 3 }, () => {
      const w = new OncelyProcess(
        [
          'worker',
          '-c',
          config,
          '--database-url',
          url,
          '--poll-ms',
          '50',
          '--lease-ms',
          '1000',
          '--concurrency',
          '4',
        ],
        { BILLING_URL: billingUrl, ONCELY_GRACE_MS: '1000' },
      );
      cleanups.push(() => w.kill());
      return w;
    });

    // Once a few charges went through, the worker with a request in flight is killed.
    const victimPid = await waitFor(
      'a request in flight after three charges',
      () => Promise.resolve(billing.charges.size >= 3 ? [...billing.inFlight.values()][0] : undefined),
      60_000,
      5,
    );
    const victim = workers.find((w) => w.pid === victimPid);
    if (victim === undefined) throw new Error(`no worker has pid ${victimPid}`);
    victim.child.kill('SIGKILL');
    const killedKey = [...billing.inFlight].find(([, pid]) => pid === victimPid)?.[0];

    await waitFor(
      'every run to complete',
      async () => {
        const runs = await Promise.all(
          Array.from({ length: RUNS }, (_, i) => store.runs.get(TENANT, `charge_${i}`)),
        );
        return runs.every((r) => r?.status === 'completed') ? true : undefined;
      },
      60_000,
      100,
    );

    expect(billing.peak).toBeLessThanOrEqual(LIMIT);
    expect(billing.peak).toBe(LIMIT); // the limit was reached, so the test shows it holding
    // One charge per key, and each key's requests never overlapped more than once per attempt.
    expect(billing.charges.size).toBe(RUNS);
    const records = await store.ledger.list(TENANT, { limit: 100 });
    expect(records.map((r) => r.status)).toEqual(Array(RUNS).fill('completed'));
    expect(new Set(records.map((r) => r.idempotencyKey))).toEqual(new Set(billing.charges.keys()));
    if (killedKey !== undefined) {
      // The killed worker's charge landed; the run's next driver learned it from the books.
      const record = await store.ledger.get(TENANT, killedKey);
      expect(record?.status).toBe('completed');
      expect(billing.requests.filter((r) => r.key === killedKey).length).toBe(1);
    }
    // Another worker said it took over the killed one's run.
    expect(workers.filter((w) => w !== victim).some((w) => w.stderr.includes('took over run'))).toBe(true);
    // The slots are free again (a finished call lets go of its slot at once).
    expect(await store.toolSlots.held('charge')).toEqual([]);
  }, 120_000);
});
