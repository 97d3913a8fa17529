import { AsyncLocalStorage } from 'node:async_hooks';
import { z } from 'zod';
import { defineAgent, type Agent } from '../src/agents/index.js';
import { ToolNotAttemptedError } from '../src/errors/index.js';
import { scriptedModel } from '../src/models/index.js';
import { defineTool, external, read, type Tool } from '../src/tools/index.js';
import { defineWorkflow, type Workflow } from '../src/workflows/index.js';
import type { Behaviour, HookBehaviour, RunPlan, SchedulePlan, ToolName } from './plan.js';
import type { WorldClock } from './virtual-clock.js';

/*
 * The world outside oncely, with books of its own: a billing service that honours the key (a credit
 * applies once per key), a mail service that cannot take one (every request that arrives sends), and
 * the timing of each request as the schedule's plan says. The invariants read these books, never the
 * ledger's word for what happened.
 */

export const TENANT = 'sim';
export const TOOL_TIMEOUT_MS = 200;
export const LANDING_MARGIN_MS = 300;
const LATENCY_MS = 5;
/** A slow request lands after its tool gave up, but before the tool's timeout plus the margin. */
const SLOW_LANDS_AFTER_MS = TOOL_TIMEOUT_MS + LANDING_MARGIN_MS / 2;
export const CREDIT_CONCURRENCY = 2;

/** The simulated process a piece of code runs in (for downstream requests and crash points). */
export const currentProcess = new AsyncLocalStorage<{
  readonly name: string;
  readonly alive: () => boolean;
}>();

export interface TimelineSink {
  note(what: string): void;
}

/** What the services did, by key: their own books. */
export class Books {
  /** Effects by key: a credit (keyed, once) or a mail sent (each request that arrives). */
  readonly applied = new Map<string, number>();
  readonly undone = new Set<string>();
  readonly inFlight = new Map<string, number>();
  readonly maxInFlight = new Map<string, number>();
  /** Requests on the wire (sent, not yet landed or lost for good). */
  onWire = 0;

  count(key: string): number {
    return this.applied.get(key) ?? 0;
  }
}

export class World {
  readonly books = new Books();
  readonly #asked = new Map<string, number>();

  constructor(
    readonly plan: SchedulePlan,
    readonly clock: WorldClock,
    readonly timeline: TimelineSink,
  ) {}

  #next(tool: 'issue_credit' | 'send_email' | 'hook'): number {
    const n = this.#asked.get(tool) ?? 0;
    this.#asked.set(tool, n + 1);
    return n;
  }

  #behaviour(tool: 'issue_credit' | 'send_email'): Behaviour {
    return this.plan.behaviours[tool][this.#next(tool)] ?? 'ok';
  }

  #apply(tool: ToolName, key: string, keyed: boolean): void {
    const before = this.books.count(key);
    if (keyed && before > 0) {
      this.timeline.note(`${tool} ${key}: a repeat of the key, recognised; no second effect`);
      return;
    }
    this.books.applied.set(key, before + 1);
    this.timeline.note(`${tool} ${key}: EFFECT ${before + 1}`);
  }

  /** One request to a service: lands (or not) and answers (or not) as the plan says. */
  request(tool: 'issue_credit' | 'send_email', key: string, signal: AbortSignal): Promise<unknown> {
    const sender = currentProcess.getStore();
    if (sender !== undefined && !sender.alive()) {
      // A killed process sends nothing more: its other calls in flight stop where they are.
      this.timeline.note(`${tool} ${key}: not sent, ${sender.name} is dead`);
      return new Promise(() => undefined);
    }
    const behaviour = this.#behaviour(tool);
    const keyed = tool === 'issue_credit';
    this.timeline.note(`${tool} ${key}: request (${behaviour}) from ${sender?.name ?? '?'}`);
    if (behaviour === 'refused') {
      return Promise.reject(new ToolNotAttemptedError(`${tool}: the token expired; nothing was sent`));
    }
    const running = (this.books.inFlight.get(tool) ?? 0) + 1;
    this.books.inFlight.set(tool, running);
    this.books.maxInFlight.set(tool, Math.max(running, this.books.maxInFlight.get(tool) ?? 0));
    this.books.onWire += 1;
    return new Promise((resolve, reject) => {
      let done = false;
      const finish = (): void => {
        if (done) return;
        done = true;
        this.books.inFlight.set(tool, (this.books.inFlight.get(tool) ?? 1) - 1);
      };
      signal.addEventListener('abort', () => {
        finish();
        reject(signal.reason as Error);
      });
      const at = (ms: number, fn: () => void): void => {
        this.clock.add('world', fn, ms);
      };
      const wire = (ms: number, fn: () => void): void =>
        at(ms, () => {
          this.books.onWire -= 1;
          fn();
        });
      switch (behaviour) {
        case 'ok':
          wire(LATENCY_MS, () => {
            this.#apply(tool, key, keyed);
            finish();
            resolve({ receipt: `rcpt_${key}` });
          });
          break;
        case 'slow':
          wire(SLOW_LANDS_AFTER_MS, () => {
            this.#apply(tool, key, keyed);
            finish();
            resolve({ receipt: `rcpt_${key}` });
          });
          break;
        case 'lost':
          wire(LATENCY_MS, () => finish());
          break;
        case 'applied-then-error':
          wire(LATENCY_MS, () => {
            this.#apply(tool, key, keyed);
            finish();
            reject(new Error(`${tool}: 502 after applying`));
          });
          break;
        case 'error-before':
          wire(LATENCY_MS, () => {
            finish();
            reject(new Error(`${tool}: 503, nothing applied`));
          });
          break;
      }
    });
  }

  /** The credit's reconcile hook: looks the key up in the billing service's books (or fails to). */
  reconcileCredit(
    key: string,
  ): Promise<{ status: 'completed'; value: unknown } | { status: 'failed' | 'unknown' }> {
    const behaviour: HookBehaviour = this.plan.hook[this.#next('hook')] ?? 'truth';
    this.timeline.note(`hook issue_credit ${key}: ${behaviour}`);
    switch (behaviour) {
      case 'truth':
        return Promise.resolve(
          this.books.count(key) > 0
            ? { status: 'completed', value: { receipt: `rcpt_${key}` } }
            : { status: 'failed' },
        );
      case 'unknown':
        return Promise.resolve({ status: 'unknown' });
      case 'throws':
        return Promise.reject(new Error('the billing lookup is down'));
      case 'hangs':
        return new Promise(() => undefined);
    }
  }

  tools(): Tool[] {
    const credit = defineTool({
      name: 'issue_credit',
      description: 'Credit an account',
      input: z.object({ accountId: z.string(), amountCents: z.number() }),
      effect: external(),
      timeoutMs: TOOL_TIMEOUT_MS,
      concurrency: CREDIT_CONCURRENCY,
      execute: (_args, ctx) => this.request('issue_credit', ctx.idempotencyKey, ctx.signal),
      reconcile: (record) => this.reconcileCredit(record.idempotencyKey),
      compensate: (record) => {
        this.books.undone.add(record.idempotencyKey);
        this.timeline.note(`issue_credit ${record.idempotencyKey}: undone`);
        return { reversed: record.idempotencyKey };
      },
    });
    const email = defineTool({
      name: 'send_email',
      description: 'Send an email',
      input: z.object({ to: z.string() }),
      effect: external(),
      timeoutMs: TOOL_TIMEOUT_MS,
      downstreamAcceptsKey: false,
      execute: (_args, ctx) => this.request('send_email', ctx.idempotencyKey, ctx.signal),
    });
    const lookup = defineTool({
      name: 'lookup_order',
      description: 'Look an order up',
      input: z.object({ orderId: z.string() }),
      effect: read(),
      timeoutMs: TOOL_TIMEOUT_MS,
      execute: (args) => Promise.resolve({ orderId: args.orderId, total: 2500 }),
    });
    return [credit, email, lookup];
  }

  /** One agent per planned run, each with its own script; and the workflow's two, if planned. */
  agents(): Agent[] {
    const tools = this.tools();
    const agents = this.plan.runs.map((run, i) => agentFor(run, i, tools));
    if (!this.plan.workflow) return agents;
    const payer = defineAgent({
      name: 'wf_payer',
      instructions: 'Pay the order.',
      // Credits, then runs out of steps (the run fails) — unless told the credit already stands.
      model: scriptedModel((prompt) => {
        const told = prompt.some(
          (m) => m.role === 'user' && JSON.stringify(m.content).includes('They stand'),
        );
        return told
          ? { text: 'the credit already stands' }
          : { toolCalls: [{ toolName: 'issue_credit', input: { accountId: 'acct_wf', amountCents: 2500 } }] };
      }),
      // Its tools all have a reconcile hook or only read: `retry` is allowed for it at load.
      tools: tools.filter((t) => t.name !== 'send_email'),
      maxSteps: 1,
      toolPolicy: { onIndeterminate: 'fail' },
    });
    const notifier = defineAgent({
      name: 'wf_notifier',
      instructions: 'Tell the customer.',
      model: scriptedModel(() => ({ text: 'told' })),
      tools: [],
    });
    return [...agents, payer, notifier];
  }

  /** The workflow a planned workflow run runs. */
  workflows(): Workflow[] {
    if (!this.plan.workflow) return [];
    return [
      defineWorkflow({
        name: 'payout',
        nodes: {
          pay: { agent: 'wf_payer', recoveryPolicy: 'retry', maxAttempts: 3, backoffMs: 100 },
          notify: { agent: 'wf_notifier', needs: ['pay'] },
        },
      }),
    ];
  }
}

export const WORKFLOW_RUN_ID = 'wf_0';

export const runIdOf = (i: number): string => `run_${i}`;
export const agentNameOf = (i: number): string => `agent_${i}`;

function inputOf(tool: ToolName, i: number): Record<string, unknown> {
  if (tool === 'issue_credit') return { accountId: `acct_${i}`, amountCents: 2500 };
  if (tool === 'send_email') return { to: `customer_${i}@example.com` };
  return { orderId: `ord_${i}` };
}

function agentFor(run: RunPlan, i: number, tools: Tool[]): Agent {
  const calls = run.calls.map((toolName) => ({ toolName, input: inputOf(toolName, i) }));
  const rounds = run.repeats ? 2 : 1;
  return defineAgent({
    name: agentNameOf(i),
    instructions: 'Settle the order.',
    model: scriptedModel((prompt) => {
      // How many of its tool responses it has seen: the model's own step, whatever the run's turn.
      const seen = prompt.filter((m) => m.role === 'tool').length;
      return seen < rounds ? { toolCalls: calls } : { text: 'settled' };
    }),
    tools,
    maxSteps: rounds + 2,
    toolPolicy: { onIndeterminate: run.onIndeterminate },
  });
}
