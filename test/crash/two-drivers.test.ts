import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { RunRecord } from '../../src/run-state/index.js';
import { waitFor } from '../support/processes.js';
import { STORE_KINDS } from '../support/stores.js';
import { useCrashHarness } from './harness.js';

/*
 * Two worker processes drive one run. Worker A reserves the credit and is frozen (SIGSTOP) before its
 * request goes out, past its lease. Worker B claims the run with a higher epoch, but A's attempt may
 * still land (a frozen process is not a dead one), so B waits until it is older than the tool's
 * timeout plus the margin; only then does it ask the reconcile hook (nothing downstream yet), run the
 * call again under the same key and complete the run. Then A thaws: it knows its lease is gone,
 * sends nothing more, its writes are fenced out, and it stands down. The billing service counts one
 * credit.
 */

const CONFIG = fileURLToPath(new URL('fixture/one-credit.yaml', import.meta.url));
const LEASE_MS = 600;
const TENANT = 'acme';
/** one-credit.yaml's runtime.landing_margin_ms. */
const LANDING_MARGIN_MS = 300;
/** The credit's timeout here: long enough that B, started after A froze, must wait for it. */
const TIMEOUT_MS = 3_000;
/** Event times are the database's, to the millisecond; allow for the truncation. */
const CLOCK_SLACK_MS = 5;

describe.each(STORE_KINDS)('two worker processes driving one run on %s', (kind) => {
  const h = useCrashHarness(kind, CONFIG, LEASE_MS);

  it('lets one of them drive: the frozen one stands down, one credit per key', async () => {
    const { run } = await h.runtime.startRun({ tenantId: TENANT, agent: 'one-credit', input: 'go' });
    const a = h.worker({ SLOW_MS: '2500', TOOL_TIMEOUT_MS: String(TIMEOUT_MS) });
    const reserved = await waitFor(
      'worker A to reserve the credit',
      async () => (await h.opened.store.ledger.list(TENANT, { runId: run.runId, limit: 1 }))[0],
      20_000,
      10,
    );
    await h.executionStarted(reserved.idempotencyKey);
    await h.freeze(a);
    await sleep(LEASE_MS * 2); // A's lease runs out while it is frozen

    const b = h.worker({ SLOW_MS: '0', TOOL_TIMEOUT_MS: String(TIMEOUT_MS) });
    const done = await waitFor(
      `run ${run.runId} to complete`,
      async (): Promise<RunRecord | undefined> => {
        const now = await h.opened.store.runs.get(TENANT, run.runId);
        return now?.status === 'completed' ? now : undefined;
      },
      20_000,
    );
    // B claimed it twice: once to find A's attempt still able to land (and let go), once to finish.
    expect(done.leaseEpoch).toBe(3);
    await b.stopsCleanly();

    a.child.kill('SIGCONT');
    await waitFor(
      'worker A to stand down',
      () => Promise.resolve(a.stderr.includes('stood down') ? true : undefined),
      20_000,
    );
    await a.stopsCleanly();

    const key = reserved.idempotencyKey;
    expect(h.billing.effectsFor(key)).toBe(1);
    expect(h.billing.appliedFor(key)).toHaveLength(1);
    const record = await h.opened.store.ledger.get(TENANT, key);
    expect(record).toMatchObject({ status: 'completed', attempt: 2 });
    const history = await h.opened.store.ledger.history(TENANT, key);
    const moves = history.map((e) => `${e.kind}:${e.via ?? ''}:${e.from ?? ''}->${e.to ?? ''}`);
    expect(moves.slice(0, 4)).toEqual([
      'transition:reserve:->started', // A
      'transition:reconcile:started->failed', // B's hook, once A's attempt could no longer land
      'transition:reserve:failed->started', // B, attempt 2, same key
      'transition:outcome:started->completed', // B
    ]);
    // B did not touch the call while A's attempt might still land: its timeout plus the margin.
    const [first, asked] = history;
    expect(Date.parse(asked?.at ?? '') - Date.parse(first?.at ?? '')).toBeGreaterThanOrEqual(
      TIMEOUT_MS + LANDING_MARGIN_MS - CLOCK_SLACK_MS,
    );
    const waited = (await h.opened.store.runs.events(TENANT, run.runId, 0, 100)).filter(
      (e) => e.type === 'run.status' && (e.data as { cause?: string }).cause === 'waiting',
    );
    expect(waited.length).toBeGreaterThanOrEqual(1);
    // A, thawed: its request was aborted (lease lost), deduplicated by the key, or never sent (frozen
    // before its attempt began, it finds its lease gone and sends nothing: not attempted, `failed`);
    // whichever, its outcome is recorded as ignored (the same key on a keyed downstream: no conflict).
    expect(moves.slice(4)).toHaveLength(1);
    expect(moves[4]).toMatch(/^ignored:outcome:completed->(indeterminate|completed|failed)$/);
    expect(history.at(-1)?.actor.id).toBe(history[0]?.actor.id); // A's own, ignored
    const final = await h.opened.store.runs.get(TENANT, run.runId);
    expect(final).toMatchObject({ status: 'completed', leaseEpoch: 3, result: { text: 'Credited.' } });
  });
});
