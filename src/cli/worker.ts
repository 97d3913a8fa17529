import { Command, InvalidArgumentError } from 'commander';
import { startWorker } from '../worker/index.js';
import { shownUrl } from './config.js';
import { createLogger } from './logger.js';
import { runtimeFromConfig } from './runtime-from-config.js';
import { stopped } from './signals.js';
import { OncelyError } from '../errors/index.js';

interface WorkerFlags {
  config: string;
  databaseUrl?: string;
  concurrency: number;
  leaseMs: number;
  pollMs: number;
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
    .option('-c, --config <file>', 'the oncely.yaml with the agents and the tools module', 'oncely.yaml')
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
    .action(async (flags: WorkerFlags) => {
      const log = createLogger('oncely-worker');
      const opened = await runtimeFromConfig({ ...flags, log });
      const { runtime, config, url } = opened;
      if (config.agents.size === 0) {
        await opened.close();
        throw new OncelyError(
          'CONFIG_INVALID',
          `${flags.config} defines no agents, so this worker could drive no run; add agents to it ` +
            '(a worker claims only runs of the agents in its configuration)',
        );
      }
      const worker = startWorker(runtime, {
        concurrency: flags.concurrency,
        pollMs: flags.pollMs,
        log,
      });
      log.info(
        { database: shownUrl(url), agents: [...config.agents.keys()], owner: runtime.owner },
        'worker started',
      );
      await stopped(log, 'stopping: no new runs; waiting for the runs in flight');
      await worker.stop();
      // A late answer of a timed-out tool is written if it comes soon; otherwise its call stays unknown.
      await runtime.close({ timeoutMs: 10_000 });
      log.info({}, 'worker stopped');
    });
}
