import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { ApiMetrics, buildApiServer, createApiKey, type ApiApp } from '../api/index.js';
import { ApiClient } from '../api/client.js';
import type { Page, Run, RunMessages, ToolExecution, ToolExecutionWithHistory } from '../api/client-types.js';
import { BillingService, type Credit } from '../demo/billing-service.js';
import { DrillProcess } from '../drill/processes.js';
import type { ApprovalRecord } from '../run-state/index.js';
import { openRuntime, type Runtime } from '../runs/index.js';
import { openStore, type Store } from '../store/index.js';
import { startWorker, type Worker } from '../worker/index.js';
import { HEIST_TENANT, LANDING_MARGIN_MS, pennyAgent } from './penny.js';

/** A process entry point beside this module in dist/ (or in dist/ when this module runs from source). */
function entry(name: string): string {
  const beside = fileURLToPath(new URL(`./${name}`, import.meta.url));
  return existsSync(beside) ? beside : fileURLToPath(new URL(`../../dist/heist/${name}`, import.meta.url));
}

const PENNY_MAIN = entry('penny-main.js');
const NAIVE_MAIN = entry('naive-main.js');

/** Who said a line of a level's story. */
export type Speaker = 'customer' | 'bot' | 'supervisor' | 'operator' | 'game';

export interface Line {
  readonly who: Speaker;
  readonly text: string;
}

/** How long any one wait of a level may take before the level is reported broken. */
const WAIT_MS = 20_000;

/**
 * One play of one trick against one bot: a payments service of its own on a loopback port, a
 * temporary directory, the processes it started (killed for sure at the end), and the story told so far.
 */
export class Stage {
  readonly lines: Line[] = [];
  readonly processes: DrillProcess[] = [];
  /** The amount a supervisor approved, when the level has one. */
  approvedCents: number | null = null;

  protected constructor(
    readonly dir: string,
    readonly payments: BillingService,
    private readonly onLine: (line: Line) => void,
  ) {}

  static async open(onLine: (line: Line) => void): Promise<Stage> {
    const dir = mkdtempSync(join(tmpdir(), 'oncely-heist-'));
    return new Stage(dir, await BillingService.start(), onLine);
  }

  say(who: Speaker, text: string): void {
    const line = { who, text };
    this.lines.push(line);
    this.onLine(line);
  }

  /** The payments service's books: every refund it paid (voided or not), oldest first. */
  get books(): readonly Credit[] {
    return this.payments.credits;
  }

  /** Starts a naive bot process on the job file. */
  naiveProcess(name: string, options: { stateFile: string; claimMs: number; thinkMs: number }): DrillProcess {
    const args = { ...options, name, paymentsUrl: this.payments.url };
    const proc = new DrillProcess(name, [NAIVE_MAIN, JSON.stringify(args)], { ONCELY_CRASH_AT: '' });
    this.processes.push(proc);
    return proc;
  }

  /** Waits (bounded) until `check` holds. */
  async until(what: string, check: () => boolean | Promise<boolean>, ms = WAIT_MS): Promise<void> {
    const deadline = Date.now() + ms;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`the level broke: ${what} did not happen within ${ms} ms`);
      await sleep(15);
    }
  }

  async close(): Promise<void> {
    this.payments.onApplied = undefined;
    await Promise.all(this.processes.map((p) => p.stop(3_000)));
    await this.payments.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A Penny process's options, as penny-main reads them. */
export interface PennyProcessOptions {
  readonly leaseMs?: number;
  readonly thinkMs?: number;
  /** An oncely crash point the process dies at (SIGKILL), the first time it reaches it. */
  readonly crashAt?: string;
}

/**
 * A stage for Penny: the SQLite ledger, a runtime and the operator HTTP API in the game's process
 * (with a worker of its own unless the level drives Penny from processes it can kill), and operator
 * API keys.
 */
export class PennyStage extends Stage {
  store!: Store;
  runtime!: Runtime;
  app!: ApiApp;
  worker: Worker | undefined;
  apiUrl = '';
  readonly #operators = new Map<string, ApiClient>();
  approval = false;

  static async openPenny(
    onLine: (line: Line) => void,
    options: { approval?: boolean; inProcess: boolean },
  ): Promise<PennyStage> {
    const dir = mkdtempSync(join(tmpdir(), 'oncely-heist-'));
    const stage = new PennyStage(dir, await BillingService.start(), onLine);
    stage.approval = options.approval === true;
    stage.store = await openStore(`sqlite:${stage.dbPath}`, { migrate: true });
    stage.runtime = await openRuntime({
      store: stage.store,
      agents: [pennyAgent({ paymentsUrl: stage.payments.url, approval: stage.approval })],
      owner: 'penny',
      leaseMs: 1_000,
      landingMarginMs: LANDING_MARGIN_MS,
      reconcileEveryMs: 150,
    });
    stage.app = await buildApiServer({
      runtime: stage.runtime,
      logger: pino({ level: 'silent' }),
      metrics: new ApiMetrics(),
    });
    stage.apiUrl = await stage.app.listen({ host: '127.0.0.1', port: 0 });
    if (options.inProcess) stage.worker = startWorker(stage.runtime, { pollMs: 25, sweepMs: 100 });
    return stage;
  }

  get dbPath(): string {
    return join(this.dir, 'ledger.db');
  }

  /** An operator's client of the HTTP API, with a real key of their own. */
  async operator(actorId: string): Promise<ApiClient> {
    const known = this.#operators.get(actorId);
    if (known !== undefined) return known;
    const { key } = await createApiKey(this.store.apiKeys, {
      tenantId: HEIST_TENANT,
      actorId,
      role: 'operator',
    });
    const client = new ApiClient(this.apiUrl, key);
    this.#operators.set(actorId, client);
    return client;
  }

  /** Starts a Penny process (a worker driving Penny) named `owner`. */
  pennyProcess(owner: string, options: PennyProcessOptions = {}): DrillProcess {
    const args = {
      db: this.dbPath,
      paymentsUrl: this.payments.url,
      owner,
      leaseMs: options.leaseMs ?? 1_000,
      thinkMs: options.thinkMs ?? 0,
      approval: this.approval,
    };
    const env: Record<string, string> = { ONCELY_CRASH_AT: options.crashAt ?? '' };
    const proc = new DrillProcess(owner, [PENNY_MAIN, JSON.stringify(args)], env);
    this.processes.push(proc);
    return proc;
  }

  async startRun(text: string): Promise<string> {
    this.say('customer', text);
    const { run } = await this.runtime.startRun({ tenantId: HEIST_TENANT, agent: 'penny', input: text });
    return run.runId;
  }

  /** The customer's next message to the same run (the conversation); false when it was refused. */
  async send(runId: string, text: string): Promise<boolean> {
    this.say('customer', text);
    const api = await this.operator('customer-desk');
    try {
      await api.post(`/v1/runs/${runId}/messages`, { content: text, client_message_id: randomUUID() });
      return true;
    } catch (error) {
      this.say(
        'game',
        `oncely refused the message: ${error instanceof Error ? error.message : String(error)}`,
      );
      return false;
    }
  }

  async run(runId: string): Promise<Run> {
    return (await this.operator('game')).get<Run>(`/v1/runs/${runId}`);
  }

  /** Waits until the run is in one of `statuses`, then tells what Penny said since. */
  async runReaches(runId: string, statuses: readonly string[]): Promise<Run> {
    let run = await this.run(runId);
    await this.until(`run ${runId} reaching ${statuses.join(' or ')}`, async () => {
      run = await this.run(runId);
      return statuses.includes(run.status);
    });
    await this.#tellPenny(runId);
    return run;
  }

  #told = 0;

  /** Penny's new words in the run's history. */
  async #tellPenny(runId: string): Promise<void> {
    const said = (await this.messages(runId)).flatMap((m) => {
      const message = m as { role?: string; content?: unknown };
      if (message.role !== 'assistant') return [];
      const parts =
        typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : message.content;
      return (parts as { type: string; text?: string }[])
        .filter((p) => p.type === 'text' && typeof p.text === 'string' && p.text !== '')
        .map((p) => p.text ?? '');
    });
    for (const text of said.slice(this.#told)) this.say('bot', text);
    this.#told = said.length;
  }

  /** The run's history as the model hears it. */
  async messages(runId: string): Promise<unknown[]> {
    const api = await this.operator('game');
    return (await api.get<RunMessages>(`/v1/runs/${runId}/messages`)).messages;
  }

  /** The run's calls in the ledger, with their histories. */
  async ledger(runId: string): Promise<ToolExecutionWithHistory[]> {
    const api = await this.operator('game');
    const page = await api.get<Page<ToolExecution>>('/v1/tool-executions', {
      status: 'all',
      run_id: runId,
      limit: 50,
    });
    return Promise.all(
      page.items.map((r) =>
        api.get<ToolExecutionWithHistory>(`/v1/tool-executions/${encodeURIComponent(r.idempotency_key)}`),
      ),
    );
  }

  /**
   * The approvals the run asked for, oldest first. Read from the store, not the HTTP API: the API's
   * approval does not carry `repeat_of`, and the game shows which earlier call a repeat repeats.
   */
  async approvals(runId: string): Promise<ApprovalRecord[]> {
    const all = await this.store.runs.listApprovals(HEIST_TENANT, { limit: 100 });
    return all.filter((a) => a.runId === runId).sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  /**
   * SIGSTOP a process, but never while it holds SQLite's write lock (a process frozen inside a write
   * transaction would stop every writer: another scenario). Thaws and tries again when it does.
   */
  async freeze(proc: DrillProcess): Promise<void> {
    const probe = new Database(this.dbPath, { timeout: 0 });
    try {
      for (let tries = 0; tries < 200; tries += 1) {
        proc.signal('SIGSTOP');
        try {
          probe.exec('BEGIN IMMEDIATE');
          probe.exec('ROLLBACK');
          return;
        } catch {
          proc.signal('SIGCONT');
          await sleep(5);
        }
      }
      throw new Error('the level broke: could not freeze the process outside a write transaction');
    } finally {
      probe.close();
    }
  }

  override async close(): Promise<void> {
    await Promise.all(this.processes.map((p) => p.stop(3_000)));
    await this.worker?.stop();
    await this.app.close();
    await this.runtime.close({ timeoutMs: 3_000 });
    await this.store.close();
    await super.close();
  }
}
