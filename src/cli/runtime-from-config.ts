import { loadConfig, type OncelyConfig } from '../config/index.js';
import { openRuntime, type Runtime } from '../runs/index.js';
import { DEFAULT_DATABASE_URL } from '../store/index.js';

export interface RuntimeFlags {
  readonly config: string;
  readonly databaseUrl?: string;
  readonly leaseMs?: number;
}

/**
 * The runtime a long-running command (`worker`, `serve`) drives: agents and tools from the
 * configuration file, the database from `--database-url`, else `ONCELY_DATABASE_URL`, else the file's
 * `storage.database_url`, else the embedded default. A schema it does not know is refused.
 */
export async function runtimeFromConfig(
  flags: RuntimeFlags,
): Promise<{ runtime: Runtime; config: OncelyConfig; url: string }> {
  const config = await loadConfig(flags.config);
  const url = flags.databaseUrl ?? config.databaseUrl ?? DEFAULT_DATABASE_URL;
  const runtime = await openRuntime({
    databaseUrl: url,
    agents: [...config.agents.values()],
    ...(flags.leaseMs === undefined ? {} : { leaseMs: flags.leaseMs }),
  });
  return { runtime, config, url };
}
