import { existsSync } from 'node:fs';
import type { LedgerLog } from '../calls/index.js';
import { loadConfig, type OncelyConfig } from '../config/index.js';
import { OncelyError } from '../errors/index.js';
import { openRuntime, type Runtime, type RuntimeOptions } from '../runs/index.js';
import { RedisWakeups, publishingWakeups } from '../store/redis-wakeups.js';
import { openStore, type Store } from '../store/index.js';
import { databaseUrl } from './config.js';

/** The configuration file `serve` and `worker` read when `-c` is not given. */
export const DEFAULT_CONFIG_FILE = 'oncely.yaml';

export interface RuntimeFlags {
  /** `-c`; unset: `oncely.yaml`. */
  readonly config?: string;
  readonly databaseUrl?: string;
  readonly leaseMs?: number;
  /**
   * `--create`: a missing SQLite database is created (a first run). Without it a missing file, or one
   * with no oncely schema, is refused (`STORE_NOT_FOUND`): a deployment never starts over on an empty
   * ledger because its file was deleted or its path mistyped.
   */
  readonly create?: boolean;
  /** Wraps the store before the runtime gets it (`serve` times ledger operations for `/metrics`). */
  readonly wrapStore?: (store: Store) => Store;
  /** Where ledger conflicts are logged at error level (the command's pino logger). */
  readonly log?: LedgerLog;
  /** Told of each model response the runtime drives (`serve` counts them for `/metrics`). */
  readonly onModelResponse?: RuntimeOptions['onModelResponse'];
  /** Told of each repeat a run's step writes down (`serve` counts them for `/metrics`). */
  readonly onRepeat?: RuntimeOptions['onRepeat'];
}

export interface CommandRuntime {
  readonly runtime: Runtime;
  readonly store: Store;
  /** The configuration file, unless an API-only `serve` runs without one. */
  readonly config: OncelyConfig | undefined;
  readonly url: string;
}

/**
 * The configuration of a long-running command: `-c FILE` (which must exist), else `oncely.yaml`.
 * With `optional` (an API-only `serve`, which needs only a database), a missing `oncely.yaml` that
 * was not named means no configuration: no agents, no tools.
 */
export async function commandConfig(
  file: string | undefined,
  options: { optional: boolean },
): Promise<OncelyConfig | undefined> {
  if (file === undefined && options.optional && !existsSync(DEFAULT_CONFIG_FILE)) return undefined;
  return loadConfig(file ?? DEFAULT_CONFIG_FILE);
}

/** Refuses a configuration with no agents for a command that drives runs. */
export function assertDrivesRuns(config: OncelyConfig | undefined, what: string, instead = ''): OncelyConfig {
  if (config !== undefined && config.agents.size > 0) return config;
  throw new OncelyError(
    'CONFIG_INVALID',
    `${config?.path ?? DEFAULT_CONFIG_FILE} defines no agents, so ${what} could drive no run; add agents ` +
      `to it (a worker claims only runs of the agents in its configuration)${instead}`,
  );
}

/**
 * The runtime a long-running command (`worker`, `serve`) drives: the agents of the configuration,
 * and every tool of its tools module (so their compensation and reconcile hooks serve operators even
 * where no agent is driven); the database from `--database-url`, else `ONCELY_DATABASE_URL`, else the
 * file's `storage.database_url`, else the embedded default. A schema it does not know is refused.
 * The store is the command's to close, after the runtime (a stop closes it even if a run hangs).
 * With `ONCELY_REDIS_URL`, wake-ups go over Redis (published after the writes that queue a run or
 * settle a call commit), instead of PostgreSQL's LISTEN/NOTIFY.
 */
export async function openCommandRuntime(
  config: OncelyConfig | undefined,
  flags: RuntimeFlags,
): Promise<CommandRuntime> {
  const url = flags.databaseUrl ?? config?.databaseUrl ?? databaseUrl(undefined);
  const raw = await openStore(url, { create: flags.create === true });
  const redisUrl = process.env.ONCELY_REDIS_URL?.trim();
  let opened = raw;
  if (redisUrl !== undefined && redisUrl !== '') {
    try {
      opened = publishingWakeups(raw, await RedisWakeups.open(redisUrl));
    } catch (error) {
      await raw.close();
      throw error;
    }
  }
  const store = flags.wrapStore === undefined ? opened : flags.wrapStore(opened);
  try {
    const runtime = await openRuntime({
      store,
      agents: [...(config?.agents.values() ?? [])],
      tools: [...(config?.tools.values() ?? [])],
      ...(flags.leaseMs === undefined ? {} : { leaseMs: flags.leaseMs }),
      ...config?.runtime,
      ...(flags.log === undefined ? {} : { log: flags.log }),
      ...(flags.onModelResponse === undefined ? {} : { onModelResponse: flags.onModelResponse }),
      ...(flags.onRepeat === undefined ? {} : { onRepeat: flags.onRepeat }),
    });
    return { runtime, store: opened, config, url };
  } catch (error) {
    await opened.close();
    throw error;
  }
}
