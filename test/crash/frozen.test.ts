import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import type { RunRecord } from '../../src/run-state/index.js';
import { waitFor } from '../support/processes.js';
import { STORE_KINDS } from '../support/stores.js';
import { useCrashHarness, type CrashHarness } from './harness.js';

/*
 * Frozen and hung worker processes, for real (SIGSTOP / SIGCONT, a hook that never answers):
 * - a frozen process is not a dead one: while its attempt may still land, nobody reconciles or
 *   re-runs its call, so a charge on a billing API that ignores keys is made once;
 * - a process that thaws after its lease ran out starts no attempt at all and stands down;
 * - a reconcile hook that never answers does not hold its run, the worker, or its shutdown.
 */

const TENANT = 'acme';
const LEASE_MS = 600;
const fixture = (name: string): string => fileURLToPath(new URL(`fixture/${name}`, import.meta.url));

const reserveMoves = (moves: readonly string[]): number =>
  moves.filter((m) => m.includes(':reserve:')).length;

/** Waits (20 s at most) until the run is in `status`, and returns it. */
function runReaches(h: CrashHarness, runId: string, status: RunRecord['status']): Promise<RunRecord> {
  return waitFor(
    `run ${runId} to be ${status}`,
    async () => {
      const now = await h.opened.store.runs.get(TENANT, runId);
      return now?.status === status ? now : undefined;
    },
    20_000,
  );
}

describe.each(STORE_KINDS)('frozen worker processes on %s', (kind) => {
  describe('an unkeyed charge', () => {
    const h = useCrashHarness(kind, fixture('one-charge.yaml'), LEASE_MS);

    it('is not re-run while the frozen attempt may still land: one charge, though the frozen request goes out', async () => {
      const env = { TOOL_TIMEOUT_MS: '4000', SLOW_MS: '1000', IGNORE_SIGNAL: '1' };
      const { run } = await h.runtime.startRun({ tenantId: TENANT, agent: 'one-charge', input: 'go' });
      const a = h.worker(env);
      const reserved = await waitFor(
        'worker A to reserve the charge',
        async () => (await h.opened.store.ledger.list(TENANT, { runId: run.runId, limit: 1 }))[0],
        20_000,
        10,
      );
      await h.executionStarted(reserved.idempotencyKey);
      await h.freeze(a); // the request is on its way: it leaves whenever A runs again
      await sleep(LEASE_MS * 2);

      const b = h.worker(env);
      // B either waits for A's attempt (the promise) or runs it again at once (two charges).
      const seen = await waitFor(
        'worker B to wait for the frozen attempt, or to finish the run',
        async (): Promise<RunRecord | undefined> => {
          const now = await h.opened.store.runs.get(TENANT, run.runId);
          const waits = now?.statusReason?.includes('may still be running in another process') === true;
          return now?.status === 'completed' || waits ? now : undefined;
        },
        20_000,
      );
      expect(seen.status).toBe('queued');
      expect((await h.opened.store.ledger.get(TENANT, reserved.idempotencyKey))?.attempt).toBe(1);

      a.child.kill('SIGCONT'); // A's request goes out now, before its attempt's deadline
      const done = await runReaches(h, run.runId, 'completed');
      expect(done.result).toEqual({ text: 'Charged.' });
      await b.stopsCleanly();
      await a.stopsCleanly();

      const key = reserved.idempotencyKey;
      expect(h.billing.appliedFor(key)).toHaveLength(1);
      const history = await h.opened.store.ledger.history(TENANT, key);
      const moves = history.map((e) => `${e.kind}:${e.via ?? ''}:${e.from ?? ''}->${e.to ?? ''}`);
      expect(reserveMoves(moves)).toBe(1);
      expect(await h.opened.store.ledger.get(TENANT, key)).toMatchObject({ status: 'completed', attempt: 1 });
    });
  });

  describe('a thawed driver whose lease ran out', () => {
    const h = useCrashHarness(kind, fixture('one-credit.yaml'), LEASE_MS);

    it('starts no attempt at all, stands down, and a fresh worker finishes with one credit', async () => {
      // A long timeout: A, thawed, may drive the run again itself, but only once this is past.
      const env = { TOOL_TIMEOUT_MS: '5000', SLOW_MS: '1000' };
      const { run } = await h.runtime.startRun({ tenantId: TENANT, agent: 'one-credit', input: 'go' });
      const a = h.worker(env);
      const reserved = await waitFor(
        'worker A to reserve the credit',
        async () => (await h.opened.store.ledger.list(TENANT, { runId: run.runId, limit: 1 }))[0],
        20_000,
        10,
      );
      const key = reserved.idempotencyKey;
      // Frozen mid-attempt (its request waits to leave), not between the reservation and the start:
      // there a lost lease means nothing was sent and the call is failed as not attempted.
      await h.executionStarted(key);
      await h.freeze(a);
      await sleep(LEASE_MS * 3); // past its lease; nobody claims the run meanwhile
      a.child.kill('SIGCONT');
      await waitFor(
        'worker A to stand down',
        () => Promise.resolve(a.stderr.includes('stood down') || undefined),
        20_000,
      );
      await a.stopsCleanly();

      const history = await h.opened.store.ledger.history(TENANT, key);
      const moves = history.map((e) => `${e.kind}:${e.via ?? ''}:${e.from ?? ''}->${e.to ?? ''}`);
      expect(reserveMoves(moves)).toBe(1); // no second or third reservation of the key
      expect(h.billing.appliedFor(key)).toHaveLength(0); // its aborted request never left

      const b = h.worker(env);
      const done = await runReaches(h, run.runId, 'completed');
      expect(done.result).toEqual({ text: 'Credited.' });
      await b.stopsCleanly();
      expect(h.billing.effectsFor(key)).toBe(1);
      expect(await h.opened.store.ledger.get(TENANT, key)).toMatchObject({ status: 'completed', attempt: 2 });
    });
  });

  describe('a reconcile hook that never answers', () => {
    const h = useCrashHarness(kind, fixture('hung-hook.yaml'), LEASE_MS);

    it('pauses its run, while the same worker goes on claiming other runs and stops on SIGTERM', async () => {
      const worker = h.worker();
      const hung = (await h.runtime.startRun({ tenantId: TENANT, agent: 'hung', input: 'go' })).run;
      const paused = await runReaches(h, hung.runId, 'awaiting_reconciliation');
      expect(paused.statusReason).toMatch(/is unknown/);
      const key = `${hung.runId}:${paused.checkpoint.pending?.calls[0]?.toolCallId ?? ''}`;
      const notes = (await h.opened.store.ledger.history(TENANT, key)).filter((e) => e.kind === 'note');
      expect(notes.at(-1)?.reason).toMatch(/did not answer within 200 ms/);

      const fine = (await h.runtime.startRun({ tenantId: TENANT, agent: 'one-credit', input: 'go' })).run;
      await runReaches(h, fine.runId, 'completed');
      const stopping = Date.now();
      await worker.stopsCleanly(10_000);
      expect(Date.now() - stopping).toBeLessThan(10_000);
    });
  });
});
