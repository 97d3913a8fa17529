import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withDefaults, type SchedulePlan } from '../../sim/plan.js';
import { freshLedger, makeTemplate, Schedule } from '../../sim/schedule.js';

/*
 * Every schedule the simulator once failed, kept as it shrank (sim/regressions.json), replayed on
 * the real runtime: each must now hold every invariant.
 */

interface Regression {
  readonly name: string;
  readonly found: string;
  readonly plan: SchedulePlan;
}

const regressions = JSON.parse(
  readFileSync(new URL('../../sim/regressions.json', import.meta.url), 'utf8'),
) as Regression[];

describe('simulator regressions', () => {
  let dir: string;
  let template: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'oncely-sim-test-'));
    template = await makeTemplate(dir);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it.each(regressions.map((r, i) => [r.name, r, i] as const))('%s', async (_name, regression, i) => {
    const result = await new Schedule(withDefaults(regression.plan), freshLedger(template, dir, i)).run();
    expect(result.violations, result.timeline.join('\n')).toEqual([]);
  });
});
