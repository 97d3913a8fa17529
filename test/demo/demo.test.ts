import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { runDemo, type DemoReport } from '../../src/demo/run-demo.js';
import type { ScenarioReport } from '../../src/demo/facts.js';
import { moves } from '../../src/demo/observe.js';
import { ROOT } from '../support/processes.js';

/*
 * The demo end to end: its four scenarios on a real SQLite file, the billing service and the operator
 * HTTP API on loopback. The test asserts the facts it reports — ledger statuses and histories, the
 * billing service's credits and voids, what the model heard — each on its own, not the wording.
 */

const scenario = (report: DemoReport, n: number): ScenarioReport => {
  const found = report.scenarios.find((s) => s.number === n);
  if (found === undefined) throw new Error(`scenario ${n} did not run: ${report.error ?? ''}`);
  return found;
};

describe('oncely demo', () => {
  it('plays the four scenarios and every fact holds', async () => {
    const report = await runDemo();
    expect(report.error).toBeUndefined();
    expect(report.scenarios.map((s) => s.number)).toEqual([1, 2, 3, 4]);

    const applied = scenario(report, 1);
    expect(applied.runStatus).toBe('completed');
    expect(applied.calls.map(moves)).toEqual([
      ['transition:started:runtime', 'transition:indeterminate:runtime', 'transition:completed:hook'],
    ]);
    expect(applied.billing).toEqual({ credits: 1, standing: 1, voids: 0 });
    expect(applied.heard.map((h) => h.status)).toEqual(['completed']);

    const lost = scenario(report, 2);
    expect(lost.runStatus).toBe('completed');
    expect(lost.calls.map((c) => [c.status, c.history.at(-1)?.actor])).toEqual([
      ['failed', 'operator ops-ana'],
    ]);
    expect(lost.billing).toEqual({ credits: 0, standing: 0, voids: 0 });
    expect(lost.heard.map((h) => [h.status, h.value.reason])).toEqual([
      ['did_not_take_effect', 'no credit under this key in the billing console'],
    ]);

    const undone = scenario(report, 3);
    expect(undone.calls.map((c) => [c.key.endsWith(':compensation'), c.status])).toEqual([
      [false, 'compensated'],
      [true, 'completed'],
    ]);
    expect(undone.billing).toEqual({ credits: 1, standing: 0, voids: 1 });
    expect(undone.heard.map((h) => h.status)).toEqual(['compensated', 'rejected']);

    const refused = scenario(report, 4);
    expect(refused.heard.map((h) => h.status)).toEqual(['not_attempted']);
    expect(refused.calls.map((c) => c.attempt)).toEqual([2]);
    expect(refused.billing).toEqual({ credits: 1, standing: 1, voids: 0 });

    for (const s of report.scenarios) expect(s.facts.filter((f) => !f.ok)).toEqual([]);
    expect(report.ok).toBe(true);
  });

  it('runs one scenario from the command line and prints its facts as JSON', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['dist/cli/main.js', 'demo', '--scenario', '2', '--json'],
      { cwd: ROOT, timeout: 60_000 },
    );
    const report = JSON.parse(stdout) as DemoReport;
    expect(report.ok).toBe(true);
    expect(report.scenarios.map((s) => [s.number, s.runStatus, s.billing.credits])).toEqual([
      [2, 'completed', 0],
    ]);
  });
});
