import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/databases.js';
import { OncelyProcess, createKeyWithCli, servingAddress, waitFor } from '../support/processes.js';

/*
 * The whole `/metrics` exposition of a live `oncely serve` (its worker drove a run, so every family
 * has series), read by real parsers: Prometheus' own `promtool check metrics` (its text-format parser
 * and linter) on the Prometheus text format, and the OpenMetrics parser of the Python client
 * (`prometheus_client.openmetrics.parser`, strict: it refuses a family named twice, such as a gauge
 * `x` beside a counter `x_total`, whose family is `x`) on what a scraper asking for OpenMetrics gets.
 * Debian's packages `prometheus` and `python3-prometheus-client` provide them (.ci/run installs them);
 * ONCELY_REQUIRE_PROMTOOL=1 makes their absence a failure instead of a skip.
 */

const PYTHON = '/usr/bin/python3';
const OPENMETRICS_PARSE = `
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
families = [{"name": f.name, "type": f.type, "samples": len(f.samples)}
            for f in text_string_to_metric_families(sys.stdin.read())]
print(json.dumps(families))
`;

const hasPromtool = spawnSync('promtool', ['--version']).status === 0;
const hasParser = spawnSync(PYTHON, ['-c', 'import prometheus_client.openmetrics.parser']).status === 0;
if ((!hasPromtool || !hasParser) && process.env.ONCELY_REQUIRE_PROMTOOL === '1') {
  throw new Error(
    'ONCELY_REQUIRE_PROMTOOL=1 but promtool or the Python OpenMetrics parser is missing ' +
      '(apt-get install -y prometheus python3-prometheus-client)',
  );
}

/** The linter's finding on prom-client's stock gauges named `nodejs_active_*_total`. */
const STOCK_GAUGE_FINDING = /^nodejs_active_\w+_total non-counter metrics should not have "_total" suffix$/;

const CONFIG = fileURLToPath(new URL('./fixture/oncely.yaml', import.meta.url));

describe.skipIf(!hasPromtool || !hasParser)('the /metrics exposition of a live server', () => {
  let db: { url: string; drop(): Promise<void> };
  let proc: OncelyProcess;
  let base: string;

  beforeAll(async () => {
    db = await createTestDatabase('exposition');
    const migrate = new OncelyProcess(['migrate', '--database-url', db.url], {});
    expect((await migrate.exit(20_000)).code, migrate.stderr).toBe(0);
    proc = new OncelyProcess(
      ['serve', '--config', CONFIG, '--database-url', db.url, '--port', '0', '--poll-ms', '50'],
      { ONCELY_LOG_LEVEL: 'info' },
    );
    base = await servingAddress(proc);
    const key = await createKeyWithCli(db.url, { tenant: 'acme', actor: 'ops', role: 'operator' });
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const created = await fetch(`${base}/v1/runs`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ agent: 'credit-agent', input: 'credit acct_1 $25', run_id: 'run_expo' }),
    });
    expect(created.status).toBe(201);
    await waitFor(
      'the run to complete',
      async () => {
        const run = (await (await fetch(`${base}/v1/runs/run_expo`, { headers })).json()) as {
          status: string;
        };
        return run.status === 'completed' ? run : undefined;
      },
      20_000,
      50,
    );
  }, 60_000);

  afterAll(async () => {
    await proc?.kill();
    await db?.drop();
  });

  it('is valid Prometheus text: promtool parses it and its linter finds nothing in our metrics', async () => {
    const answer = await fetch(`${base}/metrics`);
    expect(answer.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await answer.text();
    expect(text).toMatch(/^oncely_tool_call_records\{tool="issue_credit",status="completed"\} 1$/m);
    const checked = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    const findings = `${checked.stdout}${checked.stderr}`.split('\n').filter(Boolean);
    // 0: clean; 3: lint findings only (1 would be a text the parser refused).
    expect([0, 3], findings.join('\n')).toContain(checked.status);
    // prom-client's stock gauges keep their stock names (nodejs_active_handles_total, ...), which
    // the linter flags; nothing else may be flagged.
    expect(findings.filter((line) => !STOCK_GAUGE_FINDING.test(line))).toEqual([]);
  });

  it('is valid OpenMetrics, with no family named twice, when the scraper asks for it as Prometheus does', async () => {
    const answer = await fetch(`${base}/metrics`, {
      headers: {
        accept:
          'application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,' +
          'text/plain;version=0.0.4;q=0.5,*/*;q=0.1',
      },
    });
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toMatch(/^application\/openmetrics-text; version=1\.0\.0/);
    const text = await answer.text();
    expect(text.endsWith('# EOF\n')).toBe(true);
    const parsed = spawnSync(PYTHON, ['-c', OPENMETRICS_PARSE], { input: text, encoding: 'utf8' });
    expect(parsed.stderr).toBe('');
    expect(parsed.status).toBe(0);
    const families = JSON.parse(parsed.stdout) as { name: string; type: string; samples: number }[];
    const names = families.map((f) => f.name);
    expect(new Set(names).size).toBe(names.length);
    const typeOf = new Map(families.map((f) => [f.name, f.type]));
    // The database's count and this process's writes are two families, each with series.
    expect(typeOf.get('oncely_tool_call_records')).toBe('gauge');
    expect(typeOf.get('oncely_tool_calls')).toBe('counter');
    for (const name of [
      'oncely_tool_call_records',
      'oncely_tool_calls',
      'oncely_runs',
      'oncely_model_calls',
    ]) {
      expect(families.find((f) => f.name === name)?.samples, name).toBeGreaterThan(0);
    }
    expect(typeOf.get('oncely_ledger_operation_duration_seconds')).toBe('histogram');
  });

  it('is also checked by a parser that can fail: a gauge beside a counter of its name is refused', () => {
    const clash = '# TYPE x gauge\nx 1\n# TYPE x counter\nx_total 1\n# EOF\n';
    const parsed = spawnSync(PYTHON, ['-c', OPENMETRICS_PARSE], { input: clash, encoding: 'utf8' });
    expect(parsed.status).not.toBe(0);
  });
});
