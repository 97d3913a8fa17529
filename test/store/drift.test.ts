import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.js';
import {
  OPERATOR,
  Runtimes,
  STORES,
  TENANT,
  creditAndOwnerKeys,
  scriptedAgent,
  type OpenedStore,
} from '../runs/fixtures.js';
import {
  CREDIT,
  OWNER,
  changeOwner,
  creditAndOwnerSteps,
  FakeDownstream,
  issueCredit,
} from '../runs/tools.js';

/*
 * The two stores cannot drift apart silently: the same runs, driven the same way on SQLite and on
 * PostgreSQL, leave the same trace in each: every run event (type and data, in order), every ledger
 * record and its history, the conversations and their turns, the approvals and the runs as they end. Times, the
 * minted call ids and store-wide event ids are the only things that may differ, and are masked.
 */

/** Masks what may differ between two runs of one scenario: times, minted call ids, store-wide ids. */
function masked(value: unknown): unknown {
  const ids = new Map<string, string>();
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') {
      if (/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/.test(v)) return '<time>';
      return v.replace(/call_[0-9a-f]{16}/g, (id) => {
        if (!ids.has(id)) ids.set(id, `call_#${ids.size + 1}`);
        return ids.get(id)!;
      });
    }
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(
        Object.entries(v)
          .filter(([k]) => k !== 'id')
          .map(([k, x]) => [k, walk(x)]),
      );
    }
    return v;
  };
  return walk(value);
}

/** Everything the store holds of these runs, in a fixed order. */
async function trace(store: Store, runIds: readonly string[]): Promise<unknown> {
  const runs = [];
  for (const runId of runIds) {
    const run = await store.runs.get(TENANT, runId);
    const records = await store.ledger.list(TENANT, { runId, limit: 100 });
    records.sort((a, b) => a.toolName.localeCompare(b.toolName));
    runs.push({
      run,
      events: await store.runs.events(TENANT, runId, 0, 1_000),
      turns: await store.runs.turns(TENANT, runId),
      approvals: await store.runs.approvalsOfRun(TENANT, runId),
      records: await Promise.all(
        records.map(async (record) => ({
          record,
          history: await store.ledger.history(TENANT, record.idempotencyKey),
        })),
      ),
    });
  }
  return masked(runs);
}

/**
 * The scenario: an approval and an unknown call in one step, settled in turn; a run failed then
 * retried; one cancelled; one let go on a model outage, then sent a second message (twice).
 */
async function scenario(store: Store, runtimes: Runtimes): Promise<unknown> {
  const downstream = new FakeDownstream();
  const credit = issueCredit(downstream, { approval: true });
  const owner = changeOwner(downstream, { applies: false });
  const { agent: paused } = scriptedAgent(creditAndOwnerSteps('Done.'), [credit, owner], {
    name: 'drift_paused',
    onIndeterminate: 'pause',
  });
  const { agent: failing } = scriptedAgent(
    [{ toolCalls: [{ toolName: 'change_owner', input: OWNER }] }, { text: 'Done.' }],
    [owner],
    { name: 'drift_failing' },
  );
  // A model that is down once (a transient failure: the run is let go, to be claimed again), then answers.
  let outages = 0;
  const { agent: outage } = scriptedAgent(
    () => {
      if (outages++ === 0) throw new TypeError('fetch failed');
      return { text: 'Done.' };
    },
    [],
    { name: 'drift_outage' },
  );
  const runtime = runtimes.open(store, [paused, failing, outage], { owner: 'drift', retryBaseMs: 1 });
  const input = `Credit acct_7 ${CREDIT.amountCents} and give it to dana.`;

  await runtime.startRun({ tenantId: TENANT, agent: 'drift_paused', input, runId: 'run_drift_paused' });
  const waiting = await runtime.drive(TENANT, 'run_drift_paused');
  const [creditKey, ownerKey] = creditAndOwnerKeys(waiting);
  await runtime.approve({
    tenantId: TENANT,
    idempotencyKey: creditKey,
    actorId: OPERATOR,
    reason: 'checked',
  });
  await runtime.resolve({
    tenantId: TENANT,
    idempotencyKey: ownerKey,
    status: 'failed',
    reason: 'not in the CRM',
    actorId: OPERATOR,
  });
  await runtime.drive(TENANT, 'run_drift_paused');

  await runtime.startRun({ tenantId: TENANT, agent: 'drift_failing', input, runId: 'run_drift_failed' });
  await runtime.drive(TENANT, 'run_drift_failed');
  await runtime.retry(TENANT, 'run_drift_failed', { reason: 'the CRM is back', actorId: OPERATOR });

  await runtime.startRun({ tenantId: TENANT, agent: 'drift_failing', input, runId: 'run_drift_cancelled' });
  await runtime.cancel(TENANT, 'run_drift_cancelled', { reason: 'customer left', actorId: OPERATOR });

  await runtime.startRun({ tenantId: TENANT, agent: 'drift_outage', input, runId: 'run_drift_outage' });
  await runtime.drive(TENANT, 'run_drift_outage');
  for (
    let i = 0;
    i < 100 && (await runtime.getRunSummary(TENANT, 'run_drift_outage')).status !== 'completed';
    i++
  ) {
    await sleep(10);
    await runtime.drive(TENANT, 'run_drift_outage');
  }
  // A second turn: a message sent to the answered run, sent again (the same turn), and answered.
  const next = {
    tenantId: TENANT,
    runId: 'run_drift_outage',
    content: 'And acct_8?',
    clientMessageId: 'msg_drift_2',
    actorId: OPERATOR,
  };
  await runtime.send(next);
  await runtime.send(next);
  await runtime.drive(TENANT, 'run_drift_outage');

  return trace(store, ['run_drift_paused', 'run_drift_failed', 'run_drift_cancelled', 'run_drift_outage']);
}

describe('the SQLite and PostgreSQL stores', () => {
  const opened: OpenedStore[] = [];
  const runtimes = new Runtimes();
  const traces = new Map<string, unknown>();

  beforeAll(async () => {
    for (const [name, open] of STORES) {
      const store = await open('drift');
      opened.push(store);
      traces.set(name, await scenario(store.store, runtimes));
      await runtimes.closeAll();
    }
  });
  afterAll(async () => {
    await runtimes.closeAll();
    for (const o of opened) await o.cleanup();
  });

  it('leave the same trace of the same runs: events, records and histories, conversations, approvals', () => {
    const [sqlite, postgres] = [...traces.values()];
    const runs = sqlite as {
      run: { status: string; turn: number };
      events: unknown[];
      turns: unknown[];
      records: unknown[];
    }[];
    // The scenario did what it says (the comparison below is not of two empty traces).
    expect(runs.map((r) => r.run.status)).toEqual(['completed', 'queued', 'cancelled', 'completed']);
    expect(runs.map((r) => r.events.length).every((n) => n >= 2)).toBe(true);
    expect(runs[0]?.records).toHaveLength(2);
    expect(runs[3]?.turns).toHaveLength(1);
    expect(runs[3]?.run.turn).toBe(2);
    expect(postgres).toEqual(sqlite);
  });
});
