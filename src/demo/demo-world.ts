import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pino } from 'pino';
import { defineAgent, type Agent } from '../agents/index.js';
import { ApiMetrics, buildApiServer, createApiKey, type ApiApp } from '../api/index.js';
import { ApiClient } from '../api/client.js';
import { scriptedModel, type ScriptToolCall, type ScriptedModel } from '../models/index.js';
import { openRuntime, type Runtime } from '../runs/index.js';
import { openStore, type Store } from '../store/index.js';
import { startWorker, type Worker } from '../worker/index.js';
import { BillingService } from './billing-service.js';
import { billingTools, type Outbox } from './billing-tools.js';
import { demoScript } from './scripts.js';

export const DEMO_TENANT = 'demo';
export const DEMO_OPERATOR = 'ops-ana';
/** How long a credit waits for the billing service before its outcome is unknown. */
export const CREDIT_TIMEOUT_MS = 300;

/** One scenario's agent: its scripted model (which remembers what it heard) and its calls. */
export interface DemoAgent {
  readonly agent: Agent;
  readonly model: ScriptedModel;
}

/**
 * Everything the demo runs on, all real and all local: a SQLite file, the billing service on a
 * loopback port, a runtime with a worker, and the `oncely serve` HTTP API on another loopback port,
 * called with a real operator API key.
 */
export interface DemoParts {
  readonly dbPath: string;
  readonly billing: BillingService;
  readonly token: { valid: boolean };
  readonly outbox: Outbox;
  readonly tools: ReturnType<typeof billingTools>;
  readonly agents: ReadonlyMap<string, DemoAgent>;
  readonly store: Store;
  readonly runtime: Runtime;
  readonly app: ApiApp;
  readonly worker: Worker;
  /** The operator's client of the HTTP API, with a real key. */
  readonly api: ApiClient;
}

export class DemoWorld {
  private constructor(
    readonly parts: DemoParts,
    private readonly cleanup: () => void,
  ) {}

  /** `scenarios` maps each agent name to the calls its model asks for first. */
  static async open(options: {
    db?: string;
    scenarios: ReadonlyMap<string, readonly ScriptToolCall[]>;
  }): Promise<DemoWorld> {
    const dir = options.db === undefined ? mkdtempSync(join(tmpdir(), 'oncely-demo-')) : undefined;
    const dbPath = dir === undefined ? resolve(options.db ?? '') : join(dir, 'oncely.db');
    const cleanup = (): void => {
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    };
    const billing = await BillingService.start();
    const token = { valid: true };
    const outbox: Outbox = new Map();
    const tools = billingTools({ billingUrl: billing.url, token, timeoutMs: CREDIT_TIMEOUT_MS }, outbox);
    const agents = demoAgents(options.scenarios, tools);
    const store = await openStore(`sqlite:${dbPath}`, { migrate: true });
    const runtime = await openRuntime({
      store,
      agents: [...agents.values()].map((a) => a.agent),
      owner: 'demo-worker',
      reconcileEveryMs: 60_000,
      // One process on loopback, and the credit's request is aborted with its signal: a quarter of a
      // second past its timeout it can no longer land.
      landingMarginMs: 250,
    });
    const app = await buildApiServer({
      runtime,
      logger: pino({ level: 'silent' }),
      metrics: new ApiMetrics(),
    });
    const address = await app.listen({ host: '127.0.0.1', port: 0 });
    const worker = startWorker(runtime, { pollMs: 25, sweepMs: 100 });
    const { key } = await createApiKey(store.apiKeys, {
      tenantId: DEMO_TENANT,
      actorId: DEMO_OPERATOR,
      role: 'operator',
    });
    const api = new ApiClient(address, key);
    const parts = { dbPath, billing, token, outbox, tools, agents, store, runtime, app, worker, api };
    return new DemoWorld(parts, cleanup);
  }

  async close(): Promise<void> {
    const { worker, app, runtime, store, billing } = this.parts;
    await worker.stop();
    await app.close();
    await runtime.close({ timeoutMs: 5_000 });
    await store.close();
    await billing.close();
    this.cleanup();
  }
}

function demoAgents(
  scenarios: ReadonlyMap<string, readonly ScriptToolCall[]>,
  tools: ReturnType<typeof billingTools>,
): Map<string, DemoAgent> {
  const agents = new Map<string, DemoAgent>();
  for (const [name, calls] of scenarios) {
    const model = scriptedModel(demoScript(calls), { modelId: `demo-${name}` });
    const agent = defineAgent({
      name,
      instructions: 'You help customers with billing. Tell them plainly what happened.',
      model,
      tools: [tools.issueCredit, tools.notifyCustomer],
      toolPolicy: { onIndeterminate: 'pause' },
      maxSteps: 4,
    });
    agents.set(name, { agent, model });
  }
  return agents;
}
