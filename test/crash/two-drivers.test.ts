import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { RunRecord } from '../../src/run-state/index.js';
import { waitFor } from '../support/processes.js';
import { STORE_KINDS } from '../support/stores.js';
import { useCrashHarness } from './harness.js';

/*
 * Two worker processes drive one run. Worker A reserves the credit and is frozen (SIGSTOP) before its
 * request goes out, past its lease. Worker B claims the run with a higher epoch, asks the reconcile
 * hook (nothing downstream yet), runs the call again under the same key and completes the run. Then
 * A thaws: whatever it still sends carries the same key, its writes are fenced out, and it stands
 * down. The billing service counts one credit.
 */

const CONFIG = fileURLToPath(new URL('fixture/one-credit.yaml', import.meta.url));
const LEASE_MS = 600;
const TENANT = 'acme';

describe.each(STORE_KINDS)('two worker processes driving one run on %s', (kind) => {
  const h = useCrashHarness(kind, CONFIG, LEASE_MS);

  it('lets one of them drive: the frozen one stands down, one credit per key', async () => {
    const { run } = await h.runtime.startRun({ tenantId: TENANT, agent: 'one-credit', input: 'go' });
    const a = h.worker({ SLOW_MS: '2500' });
    const reserved = await waitFor(
      'worker A to reserve the credit',
      async () => (await h.opened.store.ledger.list(TENANT, { runId: run.runId, limit: 1 }))[0],
      20_000,
      10,
    );
    a.child.kill('SIGSTOP');
    await sleep(LEASE_MS * 2); // A's lease runs out while it is frozen

    const b = h.worker({ SLOW_MS: '0' });
    const done = await waitFor(
      `run ${run.runId} to complete`,
      async (): Promise<RunRecord | undefined> => {
        const now = await h.opened.store.runs.get(TENANT, run.runId);
        return now?.status === 'completed' ? now : undefined;
      },
      20_000,
    );
    expect(done.leaseEpoch).toBe(2);
    expect(await b.stop()).toEqual({ code: 0, signal: null });

    a.child.kill('SIGCONT');
    await waitFor(
      'worker A to stand down',
      () => Promise.resolve(a.stderr.includes('stood down') ? true : undefined),
      20_000,
    );
    expect(await a.stop()).toEqual({ code: 0, signal: null });

    const key = reserved.idempotencyKey;
    expect(h.billing.effectsFor(key)).toBe(1);
    expect(h.billing.appliedFor(key)).toHaveLength(1);
    const record = await h.opened.store.ledger.get(TENANT, key);
    expect(record).toMatchObject({ status: 'completed', attempt: 2 });
    const history = await h.opened.store.ledger.history(TENANT, key);
    const moves = history.map((e) => `${e.kind}:${e.via ?? ''}:${e.from ?? ''}->${e.to ?? ''}`);
    expect(moves.slice(0, 4)).toEqual([
      'transition:reserve:->started', // A
      'transition:reconcile:started->failed', // B's hook: nothing downstream yet
      'transition:reserve:failed->started', // B, attempt 2, same key
      'transition:outcome:started->completed', // B
    ]);
    // A, thawed: its request was aborted (lease lost) or deduplicated by the key; either way its
    // outcome is recorded as ignored and changes nothing.
    expect(moves.slice(4)).toHaveLength(1);
    expect(moves[4]).toMatch(/^ignored:outcome:completed->(indeterminate|completed)$/);
    expect(history.at(-1)?.actor.id).toBe(history[0]?.actor.id); // A's own, ignored
    const final = await h.opened.store.runs.get(TENANT, run.runId);
    expect(final).toMatchObject({ status: 'completed', leaseEpoch: 2, result: { text: 'Credited.' } });
  });
});
