import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { schedulePlan, type SchedulePlan } from '../../sim/plan.js';
import { PostgresPool } from '../../sim/postgres-stores.js';
import { makeTemplate, Schedule, START_MS } from '../../sim/schedule.js';
import { createTestDatabase } from '../support/databases.js';

/*
 * The simulator's PostgreSQL leg (`npm run sim -- --store postgres`) on a database of its own: the
 * SQL's time is the virtual clock, and schedules with kills, crash points, freezes, a workflow and
 * operator moves hold every invariant and replay exactly. (Most schedules also run exactly as on
 * SQLite, but not all: where two runs may be claimed at the same virtual instant, the stores may
 * pick either.)
 */

/** Seven schedules of one seed that between them kill before and after a call, at a crash point, freeze, and hold a workflow, an operator and a guarded caller's repeats. */
function chosenPlans(): SchedulePlan[] {
  const plans = fc.sample(schedulePlan, { seed: 11, numRuns: 200 });
  const wanted: ((p: SchedulePlan) => boolean)[] = [
    (p) => p.faults.some((f) => f.kind === 'crash' && !f.after),
    (p) => p.faults.some((f) => f.kind === 'crash' && f.after),
    (p) => p.faults.some((f) => f.kind === 'crash-point'),
    (p) => p.faults.some((f) => f.kind === 'freeze'),
    (p) => p.workflow && p.operator.length > 0,
    (p) => p.runs.length === 3,
    // Guarded calls that repeat one another in one scope, one on its own (its reservation checks the repeat).
    (p) =>
      p.guarded !== undefined &&
      p.guarded.steps.filter((s) => !s.batch && s.onRepeat !== 'allow' && s.account === 0 && !s.replay)
        .length >= 2,
  ];
  return wanted.map((test) => {
    const plan = plans.find(test);
    if (plan === undefined) throw new Error('seed 11 draws no such schedule in 200');
    return plan;
  });
}

describe('the simulator on PostgreSQL', () => {
  let dir: string;
  let database: { url: string; drop(): Promise<void> };
  let postgres: PostgresPool;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'oncely-sim-pg-'));
    await makeTemplate(dir); // also loads the AI SDK before the first schedule
    database = await createTestDatabase('sim');
    postgres = await PostgresPool.create(database.url);
  });

  afterAll(async () => {
    await postgres?.close();
    await database?.drop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('reads the virtual time wherever its SQL asks for the time', async () => {
    await postgres.sync(START_MS + 1_234);
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      const { rows } = await client.query<Record<string, Date>>(
        'SELECT oncely_now() AS a, now() AS b, statement_timestamp() AS c',
      );
      const at = new Date(START_MS + 1_234);
      expect(rows[0]).toEqual({ a: at, b: at, c: at });
    } finally {
      await client.end();
    }
  });

  it('holds every invariant and replays exactly', async () => {
    for (const plan of chosenPlans()) {
      const first = await new Schedule(plan, postgres).run();
      expect(first.violations, first.timeline.join('\n')).toEqual([]);
      const again = await new Schedule(plan, postgres).run();
      expect(again.timeline).toEqual(first.timeline);
    }
  });
});
