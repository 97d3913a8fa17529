import { armedUnsafeSwitches } from '../crash/index.js';
import { Command, InvalidArgumentError } from 'commander';
import { startWorker } from '../worker/index.js';
import { WorkflowEngine } from '../workflows/index.js';
import { shownUrl } from './config.js';
import { createLogger } from './logger.js';
import { assertDrivesRuns, commandConfig, openCommandRuntime } from './runtime-from-config.js';
import { graceOption, releaseInFlight, stopWithin } from './shutdown.js';
import { stopped } from './signals.js';

interface WorkerFlags {
  config?: string;
  databaseUrl?: string;
  concurrency: number;
  leaseMs: number;
  pollMs: number;
  graceMs: number;
  create?: boolean;
}

export function positiveInt(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1)
      throw new InvalidArgumentError(`${name} must be a whole number above 0`);
    return n;
  };
}

export function workerCommand(): Command {
  return new Command('worker')
    .description(
      'drive runs: claim queued runs and runs whose driver died (expired lease), resume settled ones',
    )
    .option(
      '-c, --config <file>',
      'the oncely.yaml with the agents and the tools module (default: oncely.yaml)',
    )
    .option(
      '--database-url <url>',
      'postgres://… or sqlite:PATH (default: $ONCELY_DATABASE_URL, else the config)',
    )
    .option('--concurrency <n>', 'runs driven at once', positiveInt('--concurrency'), 4)
    .option(
      '--lease-ms <ms>',
      'how long a claim holds a run without renewal',
      positiveInt('--lease-ms'),
      30_000,
    )
    .option('--poll-ms <ms>', 'how long to wait when there is no work', positiveInt('--poll-ms'), 1000)
    .option('--create', 'create the SQLite database if there is none (a first run; else STORE_NOT_FOUND)')
    .addOption(graceOption())
    .action(async (flags: WorkerFlags) => {
      const log = createLogger('oncely-worker');
      const config = assertDrivesRuns(await commandConfig(flags.config, { optional: false }), 'this worker');
      const { runtime, store, url } = await openCommandRuntime(config, { ...flags, log });
      const workflows =
        config.workflows.size === 0
          ? undefined
          : new WorkflowEngine(runtime, [...config.workflows.values()], {
              log,
              leaseMs: flags.leaseMs,
              recheckMs: flags.leaseMs,
            });
      const worker = startWorker(runtime, {
        concurrency: flags.concurrency,
        pollMs: flags.pollMs,
        log,
        ...(workflows === undefined ? {} : { workflows }),
      });
      log.info(
        {
          database: shownUrl(url),
          agents: [...config.agents.keys()],
          workflows: [...config.workflows.keys()],
          owner: runtime.owner,
        },
        'worker started',
      );
      const unsafe = armedUnsafeSwitches();
      if (unsafe.length > 0) {
        log.error(
          { unsafeSwitches: unsafe },
          'UNSAFE TEST SWITCHES ARMED (ONCELY_UNSAFE_TEST_SWITCHES): this worker breaks the once-only promise on purpose; never run it on real data',
        );
      }
      await stopped(log, 'stopping: no new runs; waiting for the runs in flight');
      await stopWithin(
        log,
        flags.graceMs,
        [
          { what: 'the runs in flight', stop: () => worker.stop() },
          // A late answer of a timed-out tool is written if it comes in the grace; else its call stays unknown.
          { what: 'late tool answers', stop: (leftMs) => runtime.close({ timeoutMs: leftMs }) },
        ],
        async () => {
          await releaseInFlight(runtime, log);
          await store.close();
          await config.close(); // its MCP servers
        },
        'worker stopped',
      );
    });
}
