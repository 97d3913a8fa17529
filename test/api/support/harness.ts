import { defineWorkflow, WorkflowEngine } from '../../../src/workflows/index.js';
import Database from 'better-sqlite3';
import pg from 'pg';
import { pino } from 'pino';
import { Writable } from 'node:stream';
import { buildApiServer, ApiMetrics, createApiKey, type ApiApp } from '../../../src/api/index.js';
import { argsDigest, type ToolExecutionRecord } from '../../../src/ledger/index.js';
import { openRuntime, type Runtime } from '../../../src/runs/index.js';
import { openStore, type ApiKeyRole, type Store } from '../../../src/store/index.js';
import { createTestDatabase, tempSqlitePath } from '../../support/databases.js';
import { apiFixtures, type Fixtures } from './fixtures.js';

export const DIALECTS = ['sqlite', 'postgres'] as const;
export type Dialect = (typeof DIALECTS)[number];

export const TENANT = 'acme';
export const OTHER_TENANT = 'globex';

/** Every table, in a stable order: what "nothing changed in the database" compares. */
const TABLES: Record<string, string> = {
  tool_executions: 'tenant_id, idempotency_key',
  tool_execution_events: 'id',
  runs: 'tenant_id, run_id',
  run_events: 'id',
  approvals: 'tenant_id, idempotency_key',
  api_keys: 'key_id',
  workflow_runs: 'tenant_id, workflow_run_id',
  workflow_events: 'id',
  schema_migrations: 'version',
};

export interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
  /** The body parsed as JSON (undefined when it is not JSON). */
  readonly body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

export interface RequestOptions {
  readonly key?: string;
  /** Sent as JSON. */
  readonly body?: unknown;
  /** Sent exactly as given, with `Content-Type: application/json` unless a header says otherwise. */
  readonly rawBody?: string;
  readonly headers?: Record<string, string>;
  /** Answer as soon as the headers arrive and drop the body (for an event stream that has not ended). */
  readonly headersOnly?: boolean;
}

/**
 * A real server on 127.0.0.1 (ephemeral port) over a real store, with a runtime that has the fixture
 * agents and no worker (tests drive runs themselves, so the database only changes when they say).
 */
export class ApiHarness {
  keys: Record<'admin' | 'operator' | 'viewer' | 'otherAdmin' | 'otherOperator' | 'otherViewer', string> = {
    admin: '',
    operator: '',
    viewer: '',
    otherAdmin: '',
    otherOperator: '',
    otherViewer: '',
  };
  private seq = 0;

  private constructor(
    readonly dialect: Dialect,
    readonly url: string,
    readonly store: Store,
    readonly runtime: Runtime,
    readonly app: ApiApp,
    readonly base: string,
    readonly fixtures: Fixtures,
    readonly metrics: ApiMetrics,
    /** The server's workflows: `review` (node a, credit-agent, pause; node b, approval-agent, after a). */
    readonly workflows: WorkflowEngine,
    /** Every log line the server wrote, parsed. */
    readonly logLines: Record<string, unknown>[],
    private readonly cleanupDatabase: () => Promise<void>,
  ) {}

  static async start(
    dialect: Dialect,
    options: {
      bodyLimit?: number;
      /** `/metrics` needs an admin key (`oncely serve --metrics-auth`). */
      metricsAuth?: boolean;
      /** A database of the test's own (dropped by its `drop` on close), instead of a fresh one. */
      database?: { url: string; drop(): Promise<void> };
    } = {},
  ): Promise<ApiHarness> {
    const db = options.database ?? (await database(dialect));
    const metrics = new ApiMetrics({ defaultMetrics: false });
    const store = metrics.instrument(await openStore(db.url, { migrate: true }));
    const fixtures = apiFixtures();
    const runtime = await openRuntime({
      store,
      agents: fixtures.agents,
      owner: 'api-test',
      landingMarginMs: 0,
      onRepeat: (info) => metrics.toolCallRepeat(info),
    });
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) {
          lines.push(JSON.parse(line) as Record<string, unknown>);
        }
        done();
      },
    });
    const workflows = new WorkflowEngine(runtime, [
      defineWorkflow({
        name: 'review',
        nodes: {
          a: { agent: 'credit-agent', recoveryPolicy: 'pause' },
          b: { agent: 'approval-agent', needs: ['a'] },
        },
      }),
    ]);
    const app = await buildApiServer({
      runtime,
      workflows,
      metrics,
      logger: pino({ level: 'info' }, sink),
      eventPollMs: 50,
      ...(options.bodyLimit === undefined ? {} : { bodyLimit: options.bodyLimit }),
      ...(options.metricsAuth === undefined ? {} : { metricsAuth: options.metricsAuth }),
    });
    const base = await app.listen({ host: '127.0.0.1', port: 0 });
    const harness = new ApiHarness(
      dialect,
      db.url,
      store,
      runtime,
      app,
      base,
      fixtures,
      metrics,
      workflows,
      lines,
      () => db.drop(),
    );
    await harness.createKeys();
    return harness;
  }

  private async createKeys(): Promise<void> {
    const make = async (tenantId: string, actorId: string, role: ApiKeyRole) =>
      (await createApiKey(this.store.apiKeys, { tenantId, actorId, role })).key;
    this.keys = {
      admin: await make(TENANT, 'ops-admin', 'admin'),
      operator: await make(TENANT, 'ops-ana', 'operator'),
      viewer: await make(TENANT, 'ops-viewer', 'viewer'),
      otherAdmin: await make(OTHER_TENANT, 'globex-admin', 'admin'),
      otherOperator: await make(OTHER_TENANT, 'globex-ops', 'operator'),
      otherViewer: await make(OTHER_TENANT, 'globex-viewer', 'viewer'),
    };
  }

  async request(method: string, path: string, options: RequestOptions = {}): Promise<Answer> {
    const headers: Record<string, string> = { ...options.headers };
    if (options.key !== undefined) headers.authorization = `Bearer ${options.key}`;
    let body: string | undefined;
    if (options.rawBody !== undefined) body = options.rawBody;
    else if (options.body !== undefined) body = JSON.stringify(options.body);
    if (body !== undefined && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) {
      headers['content-type'] = 'application/json';
    }
    const response = await fetch(`${this.base}${path}`, { method, headers, body });
    if (options.headersOnly === true && response.ok) {
      await response.body?.cancel();
      return { status: response.status, headers: response.headers, text: '', body: undefined };
    }
    const text = await response.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    return { status: response.status, headers: response.headers, text, body: parsed };
  }

  /** Every row of every table (or of one tenant's), as text: equal snapshots mean nothing changed. */
  async snapshot(tenantId?: string): Promise<string> {
    const rows: Record<string, unknown[]> = {};
    const where = (table: string): string =>
      tenantId === undefined || table === 'schema_migrations' ? '' : 'WHERE tenant_id = $1';
    const params = (table: string): string[] => (where(table) === '' ? [] : [tenantId!]);
    if (this.dialect === 'sqlite') {
      const db = new Database(this.url.slice('sqlite:'.length), { readonly: true });
      try {
        for (const [table, order] of Object.entries(TABLES)) {
          const sql = `SELECT * FROM ${table} ${where(table).replace('$1', '?')} ORDER BY ${order}`;
          rows[table] = db.prepare(sql).all(...params(table));
        }
      } finally {
        db.close();
      }
      return JSON.stringify(rows);
    }
    const client = new pg.Client({ connectionString: this.url });
    await client.connect();
    try {
      for (const [table, order] of Object.entries(TABLES)) {
        const sql = `SELECT * FROM ${table} ${where(table)} ORDER BY ${order}`;
        rows[table] = (await client.query(sql, params(table))).rows;
      }
    } finally {
      await client.end();
    }
    return JSON.stringify(rows);
  }

  /** A fresh tenant with a key of each role, so a test sees only its own records. */
  async newTenant(): Promise<{ tenantId: string; viewer: string; operator: string; admin: string }> {
    const tenantId = this.nextId('tenant');
    const make = async (role: ApiKeyRole) =>
      (await createApiKey(this.store.apiKeys, { tenantId, actorId: `${role}-of-${tenantId}`, role })).key;
    return {
      tenantId,
      viewer: await make('viewer'),
      operator: await make('operator'),
      admin: await make('admin'),
    };
  }

  /** A call record in the ledger, taken to `status` along the transition table (as a worker would). */
  async seedCall(
    status: 'started' | 'indeterminate' | 'completed',
    options: { tenantId?: string; toolName?: string; runId?: string; timeoutMs?: number } = {},
  ): Promise<ToolExecutionRecord> {
    const tenantId = options.tenantId ?? TENANT;
    const runId = options.runId ?? `run_seed_${this.dialect}_${++this.seq}`;
    const args = { accountId: 'acct_1', amountCents: 2500 };
    const toolCallId = `call_${++this.seq}`;
    const [reserved] = await this.store.ledger.reserve(
      [
        {
          tenantId,
          idempotencyKey: `${runId}:${toolCallId}`,
          runId,
          toolCallId,
          toolName: options.toolName ?? 'issue_credit',
          effect: 'external',
          args,
          argsDigest: argsDigest(args),
          compensationOf: null,
          // An attempt that is over (the harness's runtime allows no landing margin): a `started`
          // record nobody holds is unknown at once, as a worker that died would leave it.
          attemptTimeoutMs: options.timeoutMs ?? 0,
        },
      ],
      { kind: 'runtime', id: 'seed' },
    );
    const record = reserved!.record;
    if (status === 'started') return record;
    const moved = await this.store.ledger.transition({
      tenantId,
      idempotencyKey: record.idempotencyKey,
      via: 'outcome',
      to: status,
      expect: { status: 'started', version: record.version },
      actor: { kind: 'runtime', id: 'seed' },
      reason: status === 'indeterminate' ? 'timed out' : null,
      ...(status === 'completed'
        ? {
            result: { receipt: `cr_${record.idempotencyKey}` },
            resultReference: `cr_${record.idempotencyKey}`,
          }
        : { error: { code: 'TOOL_TIMEOUT', message: 'timed out' } }),
      recordIgnored: false,
    });
    return moved.record!;
  }

  /** A run of `agent`, driven until it waits or ends. */
  async drivenRun(agent: string, tenantId = TENANT): Promise<string> {
    const runId = `run_${agent}_${this.dialect}_${++this.seq}`;
    await this.runtime.startRun({ tenantId, agent, input: 'go', runId });
    await this.runtime.drive(tenantId, runId);
    return runId;
  }

  nextId(prefix: string): string {
    return `${prefix}_${this.dialect}_${++this.seq}`;
  }

  async close(): Promise<void> {
    await this.app.close();
    this.fixtures.downstream.release();
    await this.runtime.close();
    await this.store.close();
    await this.cleanupDatabase();
  }
}

async function database(dialect: Dialect): Promise<{ url: string; drop(): Promise<void> }> {
  if (dialect === 'postgres') return createTestDatabase('api');
  const file = tempSqlitePath('api');
  return { url: `sqlite:${file.path}`, drop: () => Promise.resolve(file.cleanup()) };
}
