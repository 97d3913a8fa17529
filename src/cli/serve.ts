import { Command, InvalidArgumentError, Option } from 'commander';
import {
  ApiMetrics,
  DEFAULT_BODY_LIMIT,
  DEFAULT_MAX_STREAMS,
  DEFAULT_MAX_CONNECTIONS,
  DEFAULT_MAX_STREAMS_PER_KEY,
  buildApiServer,
} from '../api/index.js';
import { startWorker, type Worker } from '../worker/index.js';
import { WorkflowEngine } from '../workflows/index.js';
import { heistRoutes } from '../heist/web.js';
import { shownUrl } from './config.js';
import { createLogger } from './logger.js';
import { assertDrivesRuns, commandConfig, openCommandRuntime } from './runtime-from-config.js';
import { graceOption, releaseInFlight, stopWithin } from './shutdown.js';
import { stopped } from './signals.js';
import { positiveInt } from './worker.js';

interface ServeFlags {
  config?: string;
  databaseUrl?: string;
  host: string;
  port: number;
  worker: boolean;
  concurrency: number;
  leaseMs: number;
  pollMs: number;
  bodyLimit: number;
  maxStreamsPerKey: number;
  maxStreams: number;
  maxConnections: number;
  graceMs: number;
  metricsIntervalMs: number;
  metricsAuth: boolean;
  create?: boolean;
  heist: boolean;
}

const DEFAULT_METRICS_INTERVAL_MS = 5_000;

function wholeMs(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 0)
      throw new InvalidArgumentError(`${name} must be a whole number of ms, 0 or more`);
    return n;
  };
}

function portNumber(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new InvalidArgumentError('--port must be 0-65535 (0: any free port)');
  }
  return port;
}

export function serveCommand(): Command {
  return new Command('serve')
    .description('the operator HTTP API, with a worker in the same process unless --no-worker')
    .option(
      '-c, --config <file>',
      'the oncely.yaml with the agents and the tools module (default: oncely.yaml; with --no-worker ' +
        'it may be missing)',
    )
    .option(
      '--database-url <url>',
      'postgres://… or sqlite:PATH (default: $ONCELY_DATABASE_URL, else the config)',
    )
    .option('--host <host>', 'the address to listen on (0.0.0.0 for every interface)', '127.0.0.1')
    .addOption(
      new Option('--port <port>', 'the port to listen on').env('PORT').argParser(portNumber).default(8080),
    )
    .option('--no-worker', 'serve the API only; other processes run `oncely worker`')
    .option('--concurrency <n>', 'runs the worker drives at once', positiveInt('--concurrency'), 4)
    .option(
      '--lease-ms <ms>',
      'how long a claim holds a run without renewal',
      positiveInt('--lease-ms'),
      30_000,
    )
    .option(
      '--poll-ms <ms>',
      'how long the worker waits when there is no work',
      positiveInt('--poll-ms'),
      1000,
    )
    .option(
      '--body-limit <bytes>',
      'the largest request body',
      positiveInt('--body-limit'),
      DEFAULT_BODY_LIMIT,
    )
    .option(
      '--max-streams-per-key <n>',
      'open event streams one API key may hold at once (more answer 429)',
      positiveInt('--max-streams-per-key'),
      DEFAULT_MAX_STREAMS_PER_KEY,
    )
    .option(
      '--max-streams <n>',
      'open event streams this server holds at once (more answer 429)',
      positiveInt('--max-streams'),
      DEFAULT_MAX_STREAMS,
    )
    .option(
      '--max-connections <n>',
      'open connections this server holds at once (one more is answered 429 and closed)',
      positiveInt('--max-connections'),
      DEFAULT_MAX_CONNECTIONS,
    )
    .option(
      '--metrics-interval-ms <ms>',
      'the least time between two reads of the counts /metrics reports (0: on every scrape)',
      wholeMs('--metrics-interval-ms'),
      DEFAULT_METRICS_INTERVAL_MS,
    )
    .option(
      '--metrics-auth',
      "/metrics needs an admin API key (Authorization: Bearer), as it reports every tenant's counts",
      false,
    )
    .option('--create', 'create the SQLite database if there is none (a first run; else STORE_NOT_FOUND)')
    .option(
      '--heist',
      'also serve the Heist the Agent game at /heist, without API keys (off by default: its plays start ' +
        'processes and services of their own on loopback, never on this store; one play at a time)',
      false,
    )
    .addOption(graceOption())
    .action(serve);
}

async function serve(flags: ServeFlags): Promise<void> {
  const log = createLogger('oncely-serve');
  const metrics = new ApiMetrics({ minReadIntervalMs: flags.metricsIntervalMs });
  const loaded = await commandConfig(flags.config, { optional: !flags.worker });
  const config = flags.worker
    ? assertDrivesRuns(loaded, 'the worker of this serve', ', or serve the API only with --no-worker')
    : loaded;
  const { runtime, store, url } = await openCommandRuntime(config, {
    ...flags,
    log,
    wrapStore: (opened) => metrics.instrument(opened),
    onModelResponse: (response) => metrics.modelResponse(response),
    onRepeat: (info) => metrics.toolCallRepeat(info),
  });
  let worker: Worker | undefined;
  let app: Awaited<ReturnType<typeof buildApiServer>> | undefined;
  try {
    const workflows = new WorkflowEngine(runtime, [...(config?.workflows.values() ?? [])], {
      log,
      leaseMs: flags.leaseMs,
      recheckMs: flags.leaseMs,
    });
    app = await buildApiServer({
      runtime,
      workflows,
      logger: log,
      metrics,
      metricsAuth: flags.metricsAuth,
      bodyLimit: flags.bodyLimit,
      maxStreamsPerKey: flags.maxStreamsPerKey,
      maxStreams: flags.maxStreams,
      maxConnections: flags.maxConnections,
      routes: flags.heist ? [(api) => heistRoutes(api)] : [],
    });
    const address = await app.listen({ host: flags.host, port: flags.port });
    if (flags.worker) {
      worker = startWorker(runtime, {
        concurrency: flags.concurrency,
        pollMs: flags.pollMs,
        log,
        kind: 'serve',
        ...(workflows.workflows.length === 0 ? {} : { workflows }),
      });
    }
    log.info(
      {
        address,
        database: shownUrl(url),
        config: config?.path ?? null,
        agents: [...runtime.agents.keys()],
        worker: flags.worker,
      },
      'serving the oncely API',
    );
    if (runtime.tools.size === 0) {
      log.warn(
        { config: config?.path ?? null },
        'no tools module: compensate and reconcile hooks are not available from this server; ' +
          'start it with -c naming the oncely.yaml whose `tools:` module exports them',
      );
    }
    await stopped(log, 'stopping: no new requests or runs; finishing those in flight');
  } finally {
    const api = app;
    await stopWithin(
      log,
      flags.graceMs,
      [
        {
          what: 'the requests and runs in flight',
          stop: () => Promise.all([api?.close(), worker?.stop()]),
        },
        // A late answer of a timed-out tool is written if it comes in the grace; else its call stays unknown.
        { what: 'late tool answers', stop: (leftMs) => runtime.close({ timeoutMs: leftMs }) },
      ],
      async () => {
        await releaseInFlight(runtime, log);
        await store.close();
        await config?.close(); // its MCP servers
      },
      'stopped',
    );
  }
}
