import { describe, expect, it } from 'vitest';
import { ApiMetrics } from './metrics.js';

/*
 * Prometheus' naming rules (https://prometheus.io/docs/practices/naming/ and the OpenMetrics text
 * format), checked on every metric the API exposes, oncely's own and the process defaults.
 */

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
/** Suffixes a histogram or a counter adds to its series; a gauge named so would read as one of them. */
const SERIES_SUFFIXES = /_(total|count|sum|bucket|created)$/;
/** Units named in a metric's name must be base units. */
const NON_BASE_UNITS =
  /_(milliseconds|ms|microseconds|us|nanoseconds|minutes|hours|kilobytes|megabytes|percent)(_|$)/;

interface Described {
  readonly name: string;
  readonly type: string;
  readonly help: string;
  readonly labelNames: readonly string[];
}

async function described(metrics: ApiMetrics): Promise<Described[]> {
  const json = await metrics.registry.getMetricsAsJSON();
  return json.map((m) => {
    const metric = metrics.registry.getSingleMetric(m.name) as unknown as { labelNames?: string[] };
    return { name: m.name, type: String(m.type), help: m.help, labelNames: metric.labelNames ?? [] };
  });
}

describe('metric names', () => {
  it('follow Prometheus naming rules: valid names, counters end in _total, base units, fair labels', async () => {
    const all = await described(new ApiMetrics());
    const own = all.filter((m) => m.name.startsWith('oncely_'));
    expect(own.length).toBeGreaterThanOrEqual(12);
    const problems: string[] = [];
    // Every name must parse; the suffix and unit rules bind oncely's own metrics (prom-client's stock
    // defaults keep their names, e.g. the gauge nodejs_active_handles_total, for stock dashboards).
    for (const m of all.filter((m) => !own.includes(m))) {
      if (!METRIC_NAME.test(m.name)) problems.push(`${m.name}: not a valid metric name`);
      for (const label of m.labelNames)
        if (!LABEL_NAME.test(label)) problems.push(`${m.name}: label ${label}`);
    }
    for (const m of own) {
      if (!METRIC_NAME.test(m.name)) problems.push(`${m.name}: not a valid metric name`);
      if (m.name.includes('__')) problems.push(`${m.name}: '__' is reserved`);
      if (m.help.trim() === '') problems.push(`${m.name}: no help`);
      if (m.type === 'counter' && !m.name.endsWith('_total'))
        problems.push(`${m.name}: a counter not ending in _total`);
      if (m.type !== 'counter' && m.name.endsWith('_total'))
        problems.push(`${m.name}: _total on a ${m.type}`);
      if (m.type === 'gauge' && SERIES_SUFFIXES.test(m.name))
        problems.push(`${m.name}: a gauge named like a series`);
      if (NON_BASE_UNITS.test(m.name)) problems.push(`${m.name}: not in base units`);
      for (const label of m.labelNames) {
        if (!LABEL_NAME.test(label) || label.startsWith('__')) problems.push(`${m.name}: label ${label}`);
        if (label === 'le' || label === 'quantile') problems.push(`${m.name}: label ${label} is reserved`);
      }
    }
    // oncely's histograms are durations, in seconds.
    for (const m of own.filter((m) => m.type === 'histogram')) {
      if (!m.name.endsWith('_seconds')) problems.push(`${m.name}: a duration histogram not in _seconds`);
    }
    expect(problems).toEqual([]);
  });

  it('keeps the process defaults under their stock names, and names the counters the dashboards use', async () => {
    const names = (await described(new ApiMetrics())).map((m) => m.name);
    expect(names).toContain('process_cpu_user_seconds_total');
    expect(names).toContain('nodejs_eventloop_lag_seconds');
    expect(names.filter((n) => n.startsWith('oncely_process_') || n.startsWith('oncely_nodejs_'))).toEqual(
      [],
    );
    for (const name of [
      'oncely_tool_calls_total',
      'oncely_model_calls_total',
      'oncely_model_tokens_total',
      'oncely_tool_call_repeats_total',
      'oncely_http_requests_total',
      'oncely_http_request_duration_seconds',
      'oncely_ledger_operation_duration_seconds',
      'oncely_ledger_conflicts_total',
    ]) {
      expect(names).toContain(name);
    }
  });
});
