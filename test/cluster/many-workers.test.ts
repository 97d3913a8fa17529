import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { initialMessages } from '../../src/runs/messages.js';
import { openStore, type Store } from '../../src/store/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';
import { OncelyProcess, waitFor } from '../support/processes.js';
import { Billing } from './billing.js';

/*
 * Three `oncely worker` processes share one store and fifty runs of three charges each (two steps).
 * One worker is SIGKILLed while a charge of its is in flight. Every run ends, no charge key is sent
 * twice, and the ledger and billing's books agree call by call: each completed record names billing's
 * charge, and a charge the killed worker had not yet sent is settled failed by the reconcile hook.
 */

const RUNS = 50;
const CALLS_PER_RUN = 3;
const TENANT = 'acme';
const config = fileURLToPath(new URL('fixture/cluster.yaml', import.meta.url));

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (let job = cleanups.pop(); job !== undefined; job = cleanups.pop()) await job();
});

async function database(kind: 'sqlite' | 'postgres'): Promise<string> {
  if (kind === 'sqlite') {
    const file = tempSqlitePath('many_workers');
    cleanups.push(() => file.cleanup());
    return `sqlite:${file.path}`;
  }
  const db = await createTestDatabase('many_workers');
  cleanups.push(() => db.drop());
  return db.url;
}

describe.each(['sqlite', 'postgres'] as const)('three workers, one killed mid-run, on %s', (kind) => {
  it('every run ends, and every charge took effect at most once, as the ledger and the billing books both say', async () => {
    const url = await database(kind);
    const store: Store = await openStore(url, { migrate: true });
    cleanups.push(() => store.close());
    for (let i = 0; i < RUNS; i++) {
      await store.runs.create({
        tenantId: TENANT,
        runId: `order_${i}`,
        agent: 'charger',
        input: 'go',
        checkpoint: { messages: initialMessages('go'), step: 0, pending: null },
      });
    }
    const billing = new Billing(50);
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
        { BILLING_URL: billingUrl },
      );
      cleanups.push(() => w.kill());
      return w;
    });

    const victimPid = await waitFor(
      'a charge in flight after twenty charges',
      () => Promise.resolve(billing.charges.size >= 20 ? [...billing.inFlight.values()][0] : undefined),
      60_000,
      2,
    );
    const victim = workers.find((w) => w.pid === victimPid);
    if (victim === undefined) throw new Error(`no worker has pid ${victimPid}`);
    victim.child.kill('SIGKILL');

    const runs = await waitFor(
      'every run to end',
      async () => {
        const all = await Promise.all(
          Array.from({ length: RUNS }, (_, i) => store.runs.get(TENANT, `order_${i}`)),
        );
        return all.every((r) => r?.status === 'completed') ? all : undefined;
      },
      90_000,
      200,
    );
    expect(runs).toHaveLength(RUNS);

    // The ledger and the billing service's books, read independently, agree call by call. A charge
    // of the killed worker's whose request had not reached billing when it died was reconciled
    // (billing has no charge with its key) and settled `failed`: honest, and never sent again.
    const records = await store.ledger.list(TENANT, { limit: 500 });
    expect(records).toHaveLength(RUNS * CALLS_PER_RUN);
    const sent = new Map<string, number>();
    for (const request of billing.requests) sent.set(request.key, (sent.get(request.key) ?? 0) + 1);
    const verdicts = records.map((r) => {
      const charge = billing.charges.get(r.idempotencyKey);
      const receipt = (r.result as { receipt?: string } | null)?.receipt;
      return {
        key: r.idempotencyKey,
        status: r.status,
        settledBy: r.settledBy?.kind ?? null,
        reason: r.error?.message ?? null,
        requests: sent.get(r.idempotencyKey) ?? 0,
        agrees:
          r.status === 'completed'
            ? charge !== undefined && receipt === charge.receipt
            : r.status === 'failed' &&
              charge === undefined &&
              r.settledBy?.kind === 'reconcile' &&
              r.error?.message.includes('billing has no charge') === true,
      };
    });
    expect(verdicts.filter((v) => !v.agrees)).toEqual([]);
    // No charge key was sent twice, and billing took no charge the ledger does not know of.
    expect([...sent.entries()].filter(([, n]) => n > 1)).toEqual([]);
    expect(new Set(billing.charges.keys())).toEqual(
      new Set(records.filter((r) => r.status === 'completed').map((r) => r.idempotencyKey)),
    );
    // Only the killed worker's calls in hand can have missed billing (it drove at most 4 runs of at
    // most 2 calls at once).
    expect(verdicts.filter((v) => v.status === 'failed').length).toBeLessThanOrEqual(8);
    // Some runs were driven by more than one process: the killed worker's were taken over.
    expect(workers.filter((w) => w !== victim).some((w) => w.stderr.includes('took over run'))).toBe(true);
    // And each says whose: the killed worker's (its lease owner is host:pid).
    const previousOwners = workers
      .filter((w) => w !== victim)
      .flatMap((w) => [...w.stderr.matchAll(/"previousOwner":"([^"]+)"/g)].map((m) => m[1]));
    expect(previousOwners).toContain(`${hostname()}:${victimPid}`);
    const drivers = new Set(billing.requests.map((r) => r.pid));
    expect(drivers.size).toBe(3);
  }, 150_000);
});
