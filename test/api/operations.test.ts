/* eslint-disable @typescript-eslint/no-unsafe-member-access -- HTTP answers are JSON of no static type, read by assertions */
import Database from 'better-sqlite3';
import pg from 'pg';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { latestVersion, loadMigrations } from '../../src/store/migrations.js';
import { DIALECTS, TENANT, ApiHarness } from './support/harness.js';

/** One sample of the Prometheus text: the value of `name{labels}` (labels in any order), or undefined. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    const match = /^([a-z_]+)\{([^}]*)\} (\S+)$/.exec(line);
    if (match?.[1] !== name) continue;
    const found = Object.fromEntries(
      match[2]!
        .split(',')
        .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 2, -1)]),
    );
    if (Object.entries(labels).every(([k, v]) => found[k] === v)) return Number(match[3]);
  }
  return undefined;
}

async function raw(h: ApiHarness, sql: string): Promise<void> {
  if (h.dialect === 'sqlite') {
    const db = new Database(h.url.slice('sqlite:'.length));
    try {
      db.exec(sql);
    } finally {
      db.close();
    }
    return;
  }
  const client = new pg.Client({ connectionString: h.url });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

describe.each(DIALECTS)('health, readiness and metrics on %s', (dialect) => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  it('GET /healthz answers ok without a key', async () => {
    const answer = await h.request('GET', '/healthz');
    expect([answer.status, answer.body]).toEqual([200, { status: 'ok' }]);
  });

  it('GET /readyz is ready when the schema is current, and 503 when the database is ahead of the code', async () => {
    const latest = latestVersion(loadMigrations(dialect));
    const ready = await h.request('GET', '/readyz');
    expect([ready.status, ready.body]).toEqual([200, { status: 'ready', schema_version: latest }]);
    const at = dialect === 'sqlite' ? "'2099-01-01T00:00:00.000Z'" : 'now()';
    await raw(
      h,
      `INSERT INTO schema_migrations (version, name, applied_at) VALUES (${latest + 1}, 'future', ${at})`,
    );
    try {
      const ahead = await h.request('GET', '/readyz');
      expect(ahead.status).toBe(503);
      expect(ahead.body.error.code).toBe('SCHEMA_TOO_NEW');
    } finally {
      await raw(h, `DELETE FROM schema_migrations WHERE version = ${latest + 1}`);
    }
    expect((await h.request('GET', '/readyz')).status).toBe(200);
  });

  it("GET /metrics counts calls by tool and status, unknown calls per tenant with the oldest one's age, runs, and ledger latency", async () => {
    const t = await h.newTenant();
    const oldest = await h.seedCall('indeterminate', { tenantId: t.tenantId });
    await h.seedCall('started', { tenantId: t.tenantId });
    await h.seedCall('completed', { tenantId: t.tenantId });
    await h.drivenRun('credit-agent');
    await sleep(1100);
    const answer = await h.request('GET', '/metrics');
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = answer.text;
    const stats = await h.store.monitor.stats({ marginMs: 0 });
    for (const c of stats.calls) {
      expect(sample(text, 'oncely_tool_call_records', { tool: c.toolName, status: c.status })).toBe(c.count);
    }
    expect(
      sample(text, 'oncely_tool_call_records', { tool: 'issue_credit', status: 'indeterminate' }),
    ).toBeGreaterThanOrEqual(1);
    expect(sample(text, 'oncely_unknown_calls', { tenant: t.tenantId })).toBe(2);
    const age = sample(text, 'oncely_oldest_unknown_call_age_seconds', { tenant: t.tenantId })!;
    const expected = (Date.now() - Date.parse(oldest.attemptStartedAt)) / 1000;
    expect(age).toBeGreaterThanOrEqual(1);
    expect(age).toBeLessThanOrEqual(expected + 0.5);
    expect(sample(text, 'oncely_runs', { status: 'completed' })).toBe(
      stats.runs.find((r) => r.status === 'completed')?.count,
    );
    // Reservations made alone (the seeded calls) and with a step's response (the run's).
    const reserves = ['reserve', 'reserve_step'].map(
      (operation) =>
        sample(text, 'oncely_ledger_operation_duration_seconds_count', { operation, outcome: 'ok' }) ?? 0,
    );
    expect(reserves[0]).toBeGreaterThanOrEqual(3);
    expect(reserves[1]).toBeGreaterThanOrEqual(1);

    await h.request('POST', `/v1/tool-executions/${encodeURIComponent(oldest.idempotencyKey)}/resolve`, {
      key: t.operator,
      body: { status: 'failed', reason: 'not in the console' },
    });
    const after = (await h.request('GET', '/metrics')).text;
    expect(sample(after, 'oncely_unknown_calls', { tenant: t.tenantId })).toBe(1);
    expect(
      sample(after, 'oncely_ledger_operation_duration_seconds_count', {
        operation: 'transition',
        outcome: 'ok',
      })! -
        sample(text, 'oncely_ledger_operation_duration_seconds_count', {
          operation: 'transition',
          outcome: 'ok',
        })!,
    ).toBeGreaterThanOrEqual(1);
    expect(sample(after, 'oncely_unknown_calls', { tenant: TENANT })).toBeUndefined();
  });

  it('answers an unknown route with the error envelope', async () => {
    const answer = await h.request('GET', '/v1/nothing-here', { key: h.keys.viewer });
    expect(answer.status).toBe(404);
    expect(answer.body.error.code).toBe('API_ROUTE_NOT_FOUND');
  });
});

describe('/metrics behind --metrics-auth', () => {
  let h: ApiHarness;
  beforeAll(async () => {
    h = await ApiHarness.start('sqlite', { metricsAuth: true });
  });
  afterAll(() => h.close());

  it('answers an admin key only: none is 401, a viewer or operator key 403', async () => {
    const none = await h.request('GET', '/metrics');
    expect([none.status, none.body?.error?.code]).toEqual([401, 'API_AUTH_REQUIRED']);
    for (const key of [h.keys.viewer, h.keys.operator]) {
      const refused = await h.request('GET', '/metrics', { key });
      expect([refused.status, refused.body?.error?.code]).toEqual([403, 'API_FORBIDDEN']);
    }
    await h.seedCall('indeterminate');
    const admin = await h.request('GET', '/metrics', { key: h.keys.admin });
    expect(admin.status).toBe(200);
    expect(sample(admin.text, 'oncely_unknown_calls', { tenant: TENANT })).toBeGreaterThanOrEqual(1);
    // The readiness probes stay open (an orchestrator has no key).
    expect((await h.request('GET', '/readyz')).status).toBe(200);
  });
});
