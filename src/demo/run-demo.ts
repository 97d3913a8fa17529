import { errorInfo } from '../errors/index.js';
import { DemoWorld } from './demo-world.js';
import { passed, type ScenarioReport } from './facts.js';
import { narrateScenario, summaryTable } from './narrate.js';
import { SCENARIOS } from './scenarios.js';

export interface DemoOptions {
  /** Keep the SQLite file here instead of a temporary directory. */
  readonly db?: string;
  /** Run only this scenario (1-4). */
  readonly scenario?: number;
  /** Where the narration goes, line by line; nothing when `json`. */
  readonly say?: (text: string) => void;
}

export interface DemoReport {
  readonly ok: boolean;
  readonly database: string;
  readonly scenarios: readonly ScenarioReport[];
  /** Set when the demo itself broke (not a fact found false). */
  readonly error?: string;
}

/**
 * Runs the four reconciliation scenarios against the fake billing service, on the embedded SQLite
 * store, with the scripted model, a worker and the operator HTTP API on loopback. Every scenario
 * checks its facts; the report says which held.
 */
export async function runDemo(options: DemoOptions = {}): Promise<DemoReport> {
  const chosen = SCENARIOS.filter((s) => options.scenario === undefined || s.number === options.scenario);
  const say = options.say ?? (() => undefined);
  const world = await DemoWorld.open({
    ...(options.db === undefined ? {} : { db: options.db }),
    scenarios: new Map(chosen.map((s) => [s.agent, s.calls])),
  });
  const reports: ScenarioReport[] = [];
  let error: string | undefined;
  try {
    say(
      `oncely demo: SQLite ${world.parts.dbPath}, billing service ${world.parts.billing.url}, API ${world.parts.api.baseUrl}`,
    );
    for (const scenario of chosen) {
      const report = await scenario.play(world);
      reports.push(report);
      say(narrateScenario(report));
    }
    say(summaryTable(reports));
  } catch (cause) {
    error = errorInfo(cause).message;
  } finally {
    await world.close();
  }
  const ok = error === undefined && reports.every(passed);
  return { ok, database: world.parts.dbPath, scenarios: reports, ...(error === undefined ? {} : { error }) };
}
