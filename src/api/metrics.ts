import {
  Counter,
  Gauge,
  Histogram,
  Registry,
  collectDefaultMetrics,
  type Metric,
  type OpenMetricsContentType,
} from 'prom-client';
import { DEFAULT_LANDING_MARGIN_MS } from '../ledger/index.js';
import type { ToolExecutionRecord } from '../ledger/index.js';
import type {
  LedgerStore,
  ReserveResult,
  Store,
  StoreStats,
  StoreTx,
  TransitionResult,
} from '../store/index.js';
import type { ModelResponseInfo, RepeatInfo } from '../runs/index.js';

/**
 * The Prometheus metrics of one process: ledger operation latency measured as it happens, and counts
 * read from the database on each scrape (calls by tool and status, runs by status, unknown calls per
 * tenant and the age of the oldest), so every process reports the same truth.
 */
export class ApiMetrics {
  readonly registry = new Registry();
  /** The same metrics in the OpenMetrics text format, for a scraper that asks for it. */
  readonly #openMetrics = new Registry<OpenMetricsContentType>();
  readonly ledgerLatency: Histogram<'operation' | 'outcome'>;
  private readonly calls: Gauge<'tool' | 'status'>;
  private readonly runs: Gauge<'status'>;
  private readonly unknown: Gauge<'tenant'>;
  private readonly oldestUnknown: Gauge<'tenant'>;
  private readonly conflicts: Counter<'tenant'>;
  private readonly modelCalls: Counter<'agent' | 'model'>;
  private readonly modelTokens: Counter<'agent' | 'model' | 'type'>;
  private readonly repeats: Counter<'tool' | 'decision'>;
  private readonly countsAge: Gauge;
  private readonly toolCalls: Counter<'tool' | 'status'>;
  readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  readonly httpDuration: Histogram<'method' | 'route' | 'status'>;
  /** The conflicts counted so far per tenant: the counter goes up by what the database adds. */
  private readonly conflictsSeen = new Map<string, number>();
  /** The least time between two reads of the counts; scrapes in between get the last read. */
  readonly minReadIntervalMs: number;
  #lastRead: { readonly at: number; readonly stats: StoreStats } | undefined;
  #reading: Promise<StoreStats> | undefined;

  /**
   * `minReadIntervalMs`: the counts are read from the database at most this often (default 0: on
   * every scrape, which waits for them). With an interval, a scrape never waits for the database
   * once the first read is in: it gets the last counts (`oncely_metrics_counts_age_seconds` says how
   * old), and one that finds them older than the interval starts a new read for the scrapes after it.
   * Either way scrapes that arrive during a read share it, so how often the database counts does not
   * depend on how many scrapers there are or how often they ask, and a scrape costs the same on a
   * ledger of any size.
   */
  constructor(options: { defaultMetrics?: boolean; minReadIntervalMs?: number } = {}) {
    this.minReadIntervalMs = options.minReadIntervalMs ?? 0;
    const registers = [this.registry];
    this.ledgerLatency = new Histogram({
      name: 'oncely_ledger_operation_duration_seconds',
      help: "Latency of ledger store operations (reserve, transition, transitions, note, get, history, list, and the run loop's reserve_step and record_step)",
      labelNames: ['operation', 'outcome'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers,
    });
    this.calls = new Gauge({
      name: 'oncely_tool_call_records',
      help: 'Tool-execution records in the ledger by tool and status (the database count, the same from every process)',
      labelNames: ['tool', 'status'],
      registers,
    });
    this.runs = new Gauge({ name: 'oncely_runs', help: 'Runs by status', labelNames: ['status'], registers });
    this.unknown = new Gauge({
      name: 'oncely_unknown_calls',
      help: 'Unknown calls per tenant: indeterminate, and started calls no live worker holds',
      labelNames: ['tenant'],
      registers,
    });
    this.oldestUnknown = new Gauge({
      name: 'oncely_oldest_unknown_call_age_seconds',
      help: 'How long the oldest unknown call of each tenant has waited',
      labelNames: ['tenant'],
      registers,
    });
    this.conflicts = new Counter({
      name: 'oncely_ledger_conflicts_total',
      help: 'Tool calls a real outcome contradicted after they were settled (an effect on a call settled failed, or on a re-opened key): check them',
      labelNames: ['tenant'],
      registers,
    });
    this.modelCalls = new Counter({
      name: 'oncely_model_calls_total',
      help: 'Model responses of the runs this process drove, by agent and the model that answered',
      labelNames: ['agent', 'model'],
      registers,
    });
    this.modelTokens = new Counter({
      name: 'oncely_model_tokens_total',
      help: 'Tokens of those responses, by type: input, output, reasoning (part of output), cached_input (part of input)',
      labelNames: ['agent', 'model', 'type'],
      registers,
    });
    this.repeats = new Counter({
      name: 'oncely_tool_call_repeats_total',
      help: 'Repeats (a call whose tool and identity equal an earlier call that took effect) in the runs this process drove, by tool and decision: ask, refuse, wait, approved, rejected',
      labelNames: ['tool', 'decision'],
      registers,
    });
    this.countsAge = new Gauge({
      name: 'oncely_metrics_counts_age_seconds',
      help: 'How old the counts of this scrape are (read from the database at most once per --metrics-interval-ms)',
      registers,
    });
    this.toolCalls = new Counter({
      name: 'oncely_tool_calls_total',
      help: 'Tool calls as this process wrote them, by tool and the status each entered (started when reserved; completed, failed, indeterminate, ... as settled)',
      labelNames: ['tool', 'status'],
      registers,
    });
    this.httpRequests = new Counter({
      name: 'oncely_http_requests_total',
      help: 'HTTP requests answered, by method, route (its pattern) and status code',
      labelNames: ['method', 'route', 'status'],
      registers,
    });
    this.httpDuration = new Histogram({
      name: 'oncely_http_request_duration_seconds',
      help: 'Time to answer an HTTP request, by method, route (its pattern) and status code',
      labelNames: ['method', 'route', 'status'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    });
    // Node's process metrics under their usual names, so stock dashboards work.
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
    this.#openMetrics.setContentType(Registry.OPENMETRICS_CONTENT_TYPE);
    // The registry holds the metric objects themselves: each is registered in both, collected once.
    for (const metric of this.registry.getMetricsAsArray() as unknown as Metric[]) {
      this.#openMetrics.registerMetric(metric);
    }
  }

  /** Counts an HTTP request answered (`route` is the pattern, never the raw URL: no unbounded labels). */
  httpAnswered(method: string, route: string, status: number, seconds: number): void {
    const labels = { method, route, status: String(status) };
    this.httpRequests.inc(labels);
    this.httpDuration.observe(labels, seconds);
  }

  /** Counts the records this process wrote, by tool and the status each entered. */
  #written(records: readonly ToolExecutionRecord[]): void {
    for (const r of records) this.toolCalls.inc({ tool: r.toolName, status: r.status });
  }

  /** Counts a model response of a run this process drove (the runtime's `onModelResponse`). */
  modelResponse(response: ModelResponseInfo): void {
    const labels = { agent: response.agent, model: `${response.provider}/${response.modelId}` };
    this.modelCalls.inc(labels);
    const usage = response.usage;
    if (usage === null) return;
    const types: [string, number | undefined][] = [
      ['input', usage.inputTokens],
      ['output', usage.outputTokens],
      ['reasoning', usage.reasoningTokens],
      ['cached_input', usage.cachedInputTokens],
    ];
    for (const [type, tokens] of types) {
      if (tokens !== undefined && tokens > 0) this.modelTokens.inc({ ...labels, type }, tokens);
    }
  }

  /** Counts a repeat a step of a run this process drove wrote down (the runtime's `onRepeat`). */
  toolCallRepeat(info: RepeatInfo): void {
    this.repeats.inc({ tool: info.toolName, decision: info.decision });
  }

  /**
   * Reads the counts from the store (see `minReadIntervalMs`) and renders every metric in the
   * Prometheus text format, or in OpenMetrics with `openMetrics` (see `contentTypeFor`).
   */
  async render(
    store: Store,
    landingMarginMs = DEFAULT_LANDING_MARGIN_MS,
    options: { readonly openMetrics?: boolean } = {},
  ): Promise<string> {
    const stats = await this.#stats(store, landingMarginMs);
    const now = Date.now();
    for (const gauge of [this.calls, this.runs, this.unknown, this.oldestUnknown]) gauge.reset();
    this.countsAge.set(Math.max(0, (now - (this.#lastRead?.at ?? now)) / 1000));
    for (const c of stats.calls) this.calls.set({ tool: c.toolName, status: c.status }, c.count);
    for (const r of stats.runs) this.runs.set({ status: r.status }, r.count);
    for (const u of stats.unknown) {
      this.unknown.set({ tenant: u.tenantId }, u.count);
      this.oldestUnknown.set(
        { tenant: u.tenantId },
        Math.max(0, (now - Date.parse(u.oldestStartedAt)) / 1000),
      );
    }
    for (const c of stats.conflicts) {
      const seen = this.conflictsSeen.get(c.tenantId) ?? 0;
      if (c.count > seen) this.conflicts.inc({ tenant: c.tenantId }, c.count - seen);
      this.conflictsSeen.set(c.tenantId, Math.max(seen, c.count));
    }
    return options.openMetrics === true ? this.#openMetrics.metrics() : this.registry.metrics();
  }

  /**
   * The counts. Without an interval: the read in flight, else a new one. With one: the last counts
   * (starting a new read first if they are older than the interval and none is running), or, before
   * the first read is in, that read.
   */
  #stats(store: Store, marginMs: number): Promise<StoreStats> {
    const last = this.#lastRead;
    if (this.minReadIntervalMs === 0 || last === undefined)
      return this.#reading ?? this.#read(store, marginMs);
    if (this.#reading === undefined && Date.now() - last.at >= this.minReadIntervalMs) {
      // Read for the scrapes to come; a failed read leaves the last counts (their age shows it).
      this.#read(store, marginMs).catch(() => undefined);
    }
    return Promise.resolve(last.stats);
  }

  /** A new read of the counts, shared by whoever asks while it runs. */
  #read(store: Store, marginMs: number): Promise<StoreStats> {
    const reading = store.monitor
      .stats({ marginMs })
      .then((stats) => {
        this.#lastRead = { at: Date.now(), stats };
        return stats;
      })
      .finally(() => {
        this.#reading = undefined;
      });
    this.#reading = reading;
    return reading;
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /**
   * Whether a scrape's `Accept` header asks for OpenMetrics (Prometheus' scraper lists it first),
   * and the content type of the answer it gets.
   */
  static negotiate(accept: string | undefined): { openMetrics: boolean } {
    return { openMetrics: accept?.includes('application/openmetrics-text') === true };
  }

  contentTypeFor(format: { readonly openMetrics: boolean }): string {
    return format.openMetrics ? this.#openMetrics.contentType : this.registry.contentType;
  }

  /** The store with its ledger operations timed, inside transactions too. Everything else passes through. */
  instrument(store: Store): Store {
    const timed = (ledger: LedgerStore, written: Written): LedgerStore =>
      timedLedger(ledger, this.ledgerLatency, written);
    const written: Written = (records) => this.#written(records);
    const time = timer(this.ledgerLatency);
    return {
      dialect: store.dialect,
      ledger: timed(store.ledger, written),
      runs: store.runs,
      apiKeys: store.apiKeys,
      loopSteps: store.loopSteps,
      workflows: store.workflows,
      workers: store.workers,
      toolSlots: store.toolSlots,
      ...(store.wakeups === undefined ? {} : { wakeups: store.wakeups }),
      monitor: store.monitor,
      // What a transaction wrote is counted once it commits.
      transaction: async <T>(fn: (tx: StoreTx) => Promise<T>) => {
        const inTx: ToolExecutionRecord[] = [];
        const value = await store.transaction((tx) =>
          fn({
            ledger: timed(tx.ledger, (records) => inTx.push(...records)),
            runs: tx.runs,
            workflows: tx.workflows,
          }),
        );
        written(inTx);
        return value;
      },
      reserveStep: async (request) => {
        const step = await time('reserve_step', () => store.reserveStep(request));
        written(reservedOf(step?.reservations ?? []));
        return step;
      },
      recordStep: async (request) => {
        const step = await time('record_step', () => store.recordStep(request));
        written(appliedOf(step.results));
        return step;
      },
      migrate: () => store.migrate(),
      schemaState: () => store.schemaState(),
      probe: () => store.probe(),
      close: () => store.close(),
    };
  }
}

/** Times a store operation in the histogram, labelled by operation and outcome. */
function timer(histogram: Histogram<'operation' | 'outcome'>) {
  return async <T>(operation: string, work: () => Promise<T>): Promise<T> => {
    const end = histogram.startTimer({ operation });
    try {
      const value = await work();
      end({ outcome: 'ok' });
      return value;
    } catch (error) {
      end({ outcome: 'error' });
      throw error;
    }
  };
}

type Written = (records: readonly ToolExecutionRecord[]) => void;

const reservedOf = (results: readonly ReserveResult[]): ToolExecutionRecord[] =>
  results.filter((r) => r.kind === 'reserved').map((r) => r.record);

const appliedOf = (results: readonly TransitionResult[]): ToolExecutionRecord[] =>
  results.flatMap((r) => (r.applied ? [r.record] : []));

function timedLedger(
  ledger: LedgerStore,
  histogram: Histogram<'operation' | 'outcome'>,
  written: Written,
): LedgerStore {
  const time = timer(histogram);
  return {
    reserve: async (requests, actor) => {
      const results = await time('reserve', () => ledger.reserve(requests, actor));
      written(reservedOf(results));
      return results;
    },
    reserveUnlessRepeat: async (request, scope, actor) => {
      const result = await time('reserve', () => ledger.reserveUnlessRepeat(request, scope, actor));
      if (result.kind === 'reserved') written([result.record]);
      return result;
    },
    transition: async (request) => {
      const result = await time('transition', () => ledger.transition(request));
      written(appliedOf([result]));
      return result;
    },
    transitions: async (requests) => {
      const results = await time('transitions', () => ledger.transitions(requests));
      written(appliedOf(results));
      return results;
    },
    note: (request) => time('note', () => ledger.note(request)),
    get: (tenantId, key) => time('get', () => ledger.get(tenantId, key)),
    getMany: (keys) => time('get_many', () => ledger.getMany(keys)),
    history: (tenantId, key) => time('history', () => ledger.history(tenantId, key)),
    list: (tenantId, filter) => time('list', () => ledger.list(tenantId, filter)),
    guardRepeats: (tenantId, digests) => time('guard_repeats', () => ledger.guardRepeats(tenantId, digests)),
    repeatsOf: (tenantId, digests, scope) =>
      time('repeats_of', () => ledger.repeatsOf(tenantId, digests, scope)),
  };
}
