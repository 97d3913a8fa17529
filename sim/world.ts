import { AsyncLocalStorage } from 'node:async_hooks';
import { z } from 'zod';
import { defineAgent, type Agent } from '../src/agents/index.js';
import { ToolNotAttemptedError } from '../src/errors/index.js';
import { mcpTools, type McpClientLike, type McpToolInfo } from '../src/frameworks/mcp/index.js';
import { scriptedModel } from '../src/models/index.js';
import { defineTool, external, read, type Tool, type ToolContext } from '../src/tools/index.js';
import { defineWorkflow, type Workflow } from '../src/workflows/index.js';
import type { Behaviour, HookBehaviour, RunPlan, SchedulePlan, ToolName, WriteTool } from './plan.js';
import type { WorldClock } from './virtual-clock.js';

/*
 * The world outside oncely, with books of its own: a billing service that honours the key (a credit
 * applies once per key; its undo, the compensation, is counted too), a mail service that cannot take
 * one (every request that arrives sends), a refunds service that honours the key and whose every
 * refund an operator approves first, a ticket service reached over MCP (oncely/mcp's tools over
 * a client whose server honours the key it is sent in `_meta`, and answers errors the way MCP servers
 * do), and the timing of each request as the schedule's plan says. The invariants read these books,
 * never the ledger's word for what happened.
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

/** One request a process sent to a service: who sent it, under which lease, and what came back. */
export interface Attempt {
  readonly tool: WriteTool;
  readonly key: string;
  readonly runId: string;
  readonly process: string;
  /** The lease epoch of the driver that sent it (`ctx.fencingToken`). */
  readonly epoch: number | undefined;
  /** The key's attempt it belongs to (`ctx.attempt`): 1, or more once its key was re-opened. */
  readonly attempt: number;
  readonly atMs: number;
  /** When a success answer reached the tool (not aborted before): the process knew it took effect. */
  answeredOkAtMs?: number;
}

/** What the services did, by key: their own books. */
export class Books {
  /** Effects by key: a credit or a ticket (keyed, once) or a mail sent (each request that arrives). */
  readonly applied = new Map<string, number>();
  /** Compensations run by key (a credit undone): must never be more than one. */
  readonly undone = new Map<string, number>();
  readonly attempts: Attempt[] = [];
  /** What a lying reconcile hook said of a key (the opposite of these books at the time). */
  readonly lies = new Map<string, 'completed' | 'failed'>();
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

  /** Counts the model calls of an agent: 1 for its first. */
  modelCall(agent: string): number {
    const n = (this.#modelCalls.get(agent) ?? 0) + 1;
    this.#modelCalls.set(agent, n);
    return n;
  }

  readonly #modelCalls = new Map<string, number>();

  #next(tool: WriteTool | 'hook'): number {
    const n = this.#asked.get(tool) ?? 0;
    this.#asked.set(tool, n + 1);
    return n;
  }

  #behaviour(tool: WriteTool): Behaviour {
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

  /**
   * One request to a service: lands (or not) and answers (or not) as the plan says. The answers are
   * the service's: a credit or a mail answers a receipt or throws; the ticket service answers as an
   * MCP server does (a result, an error result, a JSON-RPC error with its code).
   */
  request(tool: WriteTool, ctx: ToolContext): Promise<unknown> {
    const key = ctx.idempotencyKey;
    const signal = ctx.signal;
    const sender = currentProcess.getStore();
    if (sender !== undefined && !sender.alive()) {
      // A killed process sends nothing more: its other calls in flight stop where they are.
      this.timeline.note(`${tool} ${key}: not sent, ${sender.name} is dead`);
      return new Promise(() => undefined);
    }
    const behaviour = this.#behaviour(tool);
    const keyed = tool !== 'send_email';
    const answers = ANSWERS[tool];
    this.timeline.note(`${tool} ${key}: request (${behaviour}) from ${sender?.name ?? '?'}`);
    if (behaviour === 'refused') return Promise.reject(answers.refused(key));
    const attempt: Attempt = {
      tool,
      key,
      runId: ctx.runId,
      process: sender?.name ?? '?',
      epoch: ctx.fencingToken,
      attempt: ctx.attempt,
      atMs: this.clock.now(),
    };
    this.books.attempts.push(attempt);
    const running = (this.books.inFlight.get(tool) ?? 0) + 1;
    this.books.inFlight.set(tool, running);
    this.books.maxInFlight.set(tool, Math.max(running, this.books.maxInFlight.get(tool) ?? 0));
    this.books.onWire += 1;
    return new Promise((resolve, reject) => {
      let done = false;
      const finish = (): boolean => {
        if (done) return false;
        done = true;
        this.books.inFlight.set(tool, (this.books.inFlight.get(tool) ?? 1) - 1);
        return true;
      };
      signal.addEventListener('abort', () => {
        finish();
        reject(signal.reason as Error);
      });
      const wire = (ms: number, fn: () => void): void => {
        this.clock.add(
          'world',
          () => {
            this.books.onWire -= 1;
            fn();
          },
          ms,
        );
      };
      const succeed = (): void => {
        if (finish()) {
          attempt.answeredOkAtMs = this.clock.now();
          resolve(answers.ok(key));
        }
      };
      const settle = (answer: Answer): void => {
        if (!finish()) return;
        if (answer.kind === 'reject') reject(answer.error);
        else resolve(answer.value);
      };
      switch (behaviour) {
        case 'ok':
          wire(LATENCY_MS, () => {
            this.#apply(tool, key, keyed);
            succeed();
          });
          break;
        case 'slow':
          wire(SLOW_LANDS_AFTER_MS, () => {
            this.#apply(tool, key, keyed);
            succeed();
          });
          break;
        case 'lost':
          wire(LATENCY_MS, () => finish());
          break;
        case 'applied-then-error':
          wire(LATENCY_MS, () => {
            this.#apply(tool, key, keyed);
            settle(answers.appliedThenError(key));
          });
          break;
        case 'error-before':
          wire(LATENCY_MS, () => settle(answers.errorBefore(key)));
          break;
      }
    });
  }

  /** The credit's undo: takes a little while (two operators may ask at once), counted in the books. */
  undoCredit(key: string): Promise<unknown> {
    const sender = currentProcess.getStore();
    this.timeline.note(`issue_credit ${key}: undo requested by ${sender?.name ?? '?'}`);
    this.books.onWire += 1;
    return new Promise((resolve) => {
      this.clock.add(
        'world',
        () => {
          this.books.onWire -= 1;
          const n = (this.books.undone.get(key) ?? 0) + 1;
          this.books.undone.set(key, n);
          this.timeline.note(`issue_credit ${key}: UNDONE ${n}`);
          resolve({ reversed: key });
        },
        UNDO_MS,
      );
    });
  }

  /**
   * The ticket service's MCP tools (one, `open_ticket`), through oncely/mcp over a client whose
   * server is this world. Loaded once per schedule before the processes start (listing is a promise).
   */
  async loadMcpTools(): Promise<void> {
    const client: McpClientLike = {
      transport: {},
      listTools: () => Promise.resolve({ tools: [TICKET_TOOL] }),
      request: (request, _schema, options) => {
        const key = request.params._meta?.['oncely/idempotencyKey'];
        const ctx = mcpContext.getStore();
        if (typeof key !== 'string' || ctx === undefined) {
          return Promise.reject(Object.assign(new Error('no key in _meta'), { code: -32602 }));
        }
        return this.request('open_ticket', { ...ctx, signal: options?.signal ?? ctx.signal });
      },
    };
    const tools = await mcpTools(client, { prefix: '', timeoutMs: TOOL_TIMEOUT_MS });
    // The MCP client sees the request, not the tool's context: the context travels beside it.
    this.#mcp = tools.map((tool) => ({
      ...tool,
      execute: (args: never, ctx: ToolContext) =>
        mcpContext.run(ctx, () =>
          (tool.execute as (a: never, c: ToolContext) => Promise<unknown>)(args, ctx),
        ),
    }));
  }

  #mcp: Tool[] = [];

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
      case 'lies': {
        // The opposite of the books. The ledger can only take its hook's word: it must say whose
        // word it was (settled by the reconcile hook), and a keyed downstream still applies once.
        const took = this.books.count(key) > 0;
        this.books.lies.set(key, took ? 'failed' : 'completed');
        return Promise.resolve(
          took ? { status: 'failed' } : { status: 'completed', value: { receipt: 'made up by the hook' } },
        );
      }
      case 'unknown':
        return Promise.resolve({ status: 'unknown' });
      case 'throws':
        return Promise.reject(new Error('the billing lookup is down'));
      case 'hangs':
        return new Promise(() => undefined);
      case 'garbage':
        // A hook that answers something that is not an outcome: the runtime must not take it for one.
        return Promise.resolve({ status: 'done' } as unknown as { status: 'unknown' });
    }
  }

  /** The billing service's credit; `onRepeat`: the tool's own repeat policy (a guarded caller's). */
  creditTool(onRepeat?: 'ask' | 'refuse' | 'allow'): Tool {
    return defineTool({
      name: 'issue_credit',
      description: 'Credit an account',
      input: z.object({ accountId: z.string(), amountCents: z.number() }),
      effect: external(),
      timeoutMs: TOOL_TIMEOUT_MS,
      concurrency: CREDIT_CONCURRENCY,
      ...(this.plan.sharedCredit ? { repeatWindowMs: REPEAT_WINDOW_MS } : {}),
      ...(onRepeat === undefined ? {} : { onRepeat }),
      execute: (_args, ctx) => this.request('issue_credit', ctx),
      reconcile: (record) => this.reconcileCredit(record.idempotencyKey),
      compensate: (record) => this.undoCredit(record.idempotencyKey),
    });
  }

  tools(): Tool[] {
    const credit = this.creditTool();
    const email = defineTool({
      name: 'send_email',
      description: 'Send an email',
      input: z.object({ to: z.string() }),
      effect: external(),
      timeoutMs: TOOL_TIMEOUT_MS,
      downstreamAcceptsKey: false,
      execute: (_args, ctx) => this.request('send_email', ctx),
    });
    const refund = defineTool({
      name: 'issue_refund',
      description: 'Refund an order (an operator approves each refund first)',
      input: z.object({ orderId: z.string(), amountCents: z.number() }),
      effect: external({ approval: true }),
      timeoutMs: TOOL_TIMEOUT_MS,
      execute: (_args, ctx) => this.request('issue_refund', ctx),
    });
    const lookup = defineTool({
      name: 'lookup_order',
      description: 'Look an order up',
      input: z.object({ orderId: z.string() }),
      effect: read(),
      timeoutMs: TOOL_TIMEOUT_MS,
      execute: (args) => Promise.resolve({ orderId: args.orderId, total: 2500 }),
    });
    return [credit, email, lookup, refund, ...this.#mcp];
  }

  /** One agent per planned run, each with its own script; and the workflow's two, if planned. */
  agents(): Agent[] {
    const tools = this.tools();
    const agents = this.plan.runs.map((run, i) => agentFor(run, i, tools, this));
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
      tools: tools.filter((t) => t.name === 'issue_credit' || t.name === 'lookup_order'),
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
/** The follow-up a user sends to a run that answered (a conversation's next turn). */
export const FOLLOW_UP = 'And add a goodwill credit, please.';
export const agentNameOf = (i: number): string => `agent_${i}`;

/** The account every run's first credit goes to when the plan shares one (`sharedCredit`). */
export const SHARED_ACCOUNT = 'acct_shared';
/** The tenant-wide window of the credit's repeats when the plan shares an account. */
const REPEAT_WINDOW_MS = 60_000;

function inputOf(tool: ToolName, i: number, n: number, shared = false): Record<string, unknown> {
  if (tool === 'issue_credit') {
    return { accountId: shared && n === 0 ? SHARED_ACCOUNT : `acct_${i}_${n}`, amountCents: 2500 };
  }
  if (tool === 'send_email') return { to: `customer_${i}@example.com` };
  if (tool === 'open_ticket') return { subject: `order ${i}` };
  if (tool === 'issue_refund') return { orderId: `ord_${i}`, amountCents: 4200 };
  return { orderId: `ord_${i}` };
}

function agentFor(run: RunPlan, i: number, tools: Tool[], world: World): Agent {
  // Several credits in one response: with the credit's concurrency of 2 they run in waves.
  const calls = run.calls.flatMap((toolName) =>
    Array.from({ length: toolName === 'issue_credit' ? run.credits : 1 }, (_, n) => ({
      toolName,
      input: inputOf(toolName, i, n, world.plan.sharedCredit),
    })),
  );
  const rounds = run.repeats ? 2 : 1;
  return defineAgent({
    name: agentNameOf(i),
    instructions: 'Settle the order.',
    model: scriptedModel((prompt) => {
      if (run.stalls && world.modelCall(agentNameOf(i)) === 1) {
        world.timeline.note(`the model of ${agentNameOf(i)} hangs`);
        return new Promise<never>(() => undefined);
      }
      const lastUser = prompt.map((m) => m.role).lastIndexOf('user');
      if (prompt.filter((m) => m.role === 'user').length > 1) {
        // A later turn (the user wrote again): one more credit, then an answer.
        const heard = prompt.slice(lastUser + 1).some((m) => m.role === 'tool');
        return heard
          ? { text: 'credited again' }
          : {
              toolCalls: [
                {
                  toolName: 'issue_credit',
                  input: run.againSame
                    ? inputOf('issue_credit', i, 0, world.plan.sharedCredit)
                    : { accountId: `acct_${i}_again`, amountCents: 500 },
                },
              ],
            };
      }
      // How many of its tool responses it has seen: the model's own step in its first turn.
      const seen = prompt.filter((m) => m.role === 'tool').length;
      return seen < rounds ? { toolCalls: calls } : { text: 'settled' };
    }),
    tools,
    maxSteps: rounds + 4,
    modelTimeoutMs: MODEL_TIMEOUT_MS,
    toolPolicy: { onIndeterminate: run.onIndeterminate, onRepeat: run.onRepeat },
  });
}

/** Waits of the world, in virtual ms. */
const UNDO_MS = 20;
/** An agent's model call that takes longer is given up (a hanging provider). */
const MODEL_TIMEOUT_MS = 400;

/** The context of the MCP tool call in progress (the MCP client only sees the request). */
const mcpContext = new AsyncLocalStorage<ToolContext>();

const TICKET_TOOL: McpToolInfo = {
  name: 'open_ticket',
  description: 'Open a support ticket',
  inputSchema: {
    type: 'object',
    properties: { subject: { type: 'string' } },
    required: ['subject'],
    additionalProperties: false,
  },
  annotations: { destructiveHint: false, idempotentHint: false },
};

type Answer =
  { readonly kind: 'resolve'; readonly value: unknown } | { readonly kind: 'reject'; readonly error: Error };

/** What each service answers: its receipts and its errors. */
const ANSWERS: Record<
  WriteTool,
  {
    readonly ok: (key: string) => unknown;
    readonly refused: (key: string) => Error;
    readonly appliedThenError: (key: string) => Answer;
    readonly errorBefore: (key: string) => Answer;
  }
> = {
  issue_credit: plainService('issue_credit'),
  send_email: plainService('send_email'),
  issue_refund: plainService('issue_refund'),
  open_ticket: {
    ok: (key) => ({ structuredContent: { ticket: `tkt_${key}` }, content: [] }),
    // JSON-RPC -32601: the server has no such method, so nothing ran.
    refused: () => Object.assign(new Error('MCP error -32601: Method not found'), { code: -32601 }),
    // Servers built on the SDK's McpServer answered -32602 after running the tool (their own output check).
    appliedThenError: () => ({
      kind: 'reject',
      error: Object.assign(new Error('MCP error -32602: output does not match the schema'), { code: -32602 }),
    }),
    // An error result that says nothing was applied.
    errorBefore: () => ({
      kind: 'resolve',
      value: {
        isError: true,
        content: [{ type: 'text', text: 'the ticket queue is closed; nothing was opened' }],
        _meta: { 'oncely/notApplied': true },
      },
    }),
  },
};

function plainService(tool: WriteTool): (typeof ANSWERS)[WriteTool] {
  return {
    ok: (key) => ({ receipt: `rcpt_${key}` }),
    refused: () => new ToolNotAttemptedError(`${tool}: the token expired; nothing was sent`),
    appliedThenError: () => ({ kind: 'reject', error: new Error(`${tool}: 502 after applying`) }),
    errorBefore: () => ({ kind: 'reject', error: new Error(`${tool}: 503, nothing applied`) }),
  };
}
