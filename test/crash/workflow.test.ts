import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/index.js';
import { WORKFLOW_CRASH_POINTS } from '../../src/crash/index.js';
import { WorkflowEngine } from '../../src/workflows/index.js';
import { waitFor } from '../support/processes.js';
import { STORE_KINDS } from '../support/stores.js';
import { useCrashHarness } from './harness.js';

/*
 * A workflow's own bookkeeping, killed for real: a worker process started with ONCELY_CRASH_AT at
 * each point (before an advance writes; after it started node runs; after a node run ended, before
 * its workflow was told) dies by SIGKILL; a fresh process finishes the workflow, and each node's run
 * was started once (one run per node, attempt 1 only), with one effect per key in the billing books.
 */

const TENANT = 'acme';
const LEASE_MS = 600;
const CONFIG = fileURLToPath(new URL('fixture/workflow.yaml', import.meta.url));
const NODES = ['check', 'credit', 'charge', 'wrap'];

describe.each(STORE_KINDS)('workflow bookkeeping killed on %s', (kind) => {
  const h = useCrashHarness(kind, CONFIG, LEASE_MS);

  it.each(WORKFLOW_CRASH_POINTS.map((point) => [point]))(
    'at %s: a fresh worker finishes it, each node run started once, one effect per key',
    async (point) => {
      const config = await loadConfig(CONFIG, { env: {} });
      const engine = new WorkflowEngine(h.runtime, [...config.workflows.values()]);
      const id = `wf_${point.replace(/[^a-z]/g, '')}_${Date.now()}`;
      await engine.start({
        tenantId: TENANT,
        workflow: 'settle-order',
        input: { order: 'ord_9' },
        workflowRunId: id,
      });

      const doomed = h.worker({ ONCELY_CRASH_AT: point });
      const exit = await doomed.exit(20_000);
      expect(exit.signal, doomed.stderr).toBe('SIGKILL');
      expect(doomed.stderr).toContain(`crash point ${point} armed`);

      const rescuer = h.worker();
      const done = await waitFor(
        `workflow run ${id} to complete`,
        async () => {
          const now = await h.opened.store.workflows.get(TENANT, id);
          return now?.status === 'completed' ? now : undefined;
        },
        30_000,
      );
      await rescuer.stopsCleanly();
      expect(done.result).toBe('Checked.'); // the wrap-up's answer
      // The fan-in's input was built from both results.
      expect((await h.opened.store.runs.get(TENANT, `${id}.wrap.1`))?.input).toBe('Credited. Charged.');

      const events = await engine.events(TENANT, id);
      const started = events.filter((e) => e.kind === 'node.started');
      expect(started.map((e) => `${e.node}.${e.attempt}`).sort()).toEqual(NODES.map((n) => `${n}.1`).sort());
      for (const node of NODES) {
        expect((await h.opened.store.runs.get(TENANT, `${id}.${node}.1`))?.status).toBe('completed');
        expect(await h.opened.store.runs.get(TENANT, `${id}.${node}.2`)).toBeUndefined();
      }
      const credit = await h.opened.store.ledger.list(TENANT, { runId: `${id}.credit.1`, limit: 5 });
      const charge = await h.opened.store.ledger.list(TENANT, { runId: `${id}.charge.1`, limit: 5 });
      expect(credit.map((r) => r.status)).toEqual(['completed']);
      expect(charge.map((r) => r.status)).toEqual(['completed']);
      expect(h.billing.effectsFor(credit[0]!.idempotencyKey)).toBe(1);
      expect(h.billing.appliedFor(charge[0]!.idempotencyKey)).toHaveLength(1);
    },
  );
});
