import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { initialMessages } from '../../src/runs/messages.js';
import { openStore, type Store } from '../../src/store/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';
import { OncelyProcess, waitFor } from '../support/processes.js';

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

/** The billing service: one charge per idempotency key, the peak of requests in flight. */
class Billing {
  readonly charges = new Map<string, { receipt: string; pid: number }>();
  readonly requests: { key: string; pid: number }[] = [];
  readonly inFlight = new Map<string, number>();
  peak = 0;
  server: Server | undefined;

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      const lookup = /^\/charges\/(.+)$/.exec(req.url ?? '');
      if (req.method === 'GET' && lookup !== null) {
        const charge = this.charges.get(decodeURIComponent(lookup[1]!));
        res.writeHead(charge === undefined ? 404 : 200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(charge ?? { error: 'no such charge' }));
        return;
      }
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
      req.on('end', () => {
        const key = String(req.headers['idempotency-key']);
        const { pid } = JSON.parse(body) as { pid: number };
        this.requests.push({ key, pid });
        this.inFlight.set(key, pid);
        this.peak = Math.max(this.peak, this.inFlight.size);
        // The charge takes effect now; the answer comes 300 ms later (to a caller that may be gone).
        if (!this.charges.has(key)) this.charges.set(key, { receipt: `ch_${this.charges.size + 1}`, pid });
        setTimeout(() => {
          this.inFlight.delete(key);
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(this.charges.get(key)));
        }, 300);
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }
}

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
    // The slots are free again (a finished call lets go of its slot at once).
    expect(await store.toolSlots.held('charge')).toEqual([]);
  }, 120_000);
});
