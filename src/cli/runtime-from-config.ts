import type { LedgerLog } from '../calls/index.js';
import { loadConfig, type OncelyConfig } from '../config/index.js';
import { openRuntime, type Runtime } from '../runs/index.js';
import { DEFAULT_DATABASE_URL, openStore, type Store } from '../store/index.js';

export interface RuntimeFlags {
  readonly config: string;
  readonly databaseUrl?: string;
  readonly leaseMs?: number;
  /** Wraps the store before the runtime gets it (`serve` times ledger operations for `/metrics`). */
  readonly wrapStore?: (store: Store) => Store;
  /** Where ledger conflicts are logged at error level (the command's pino logger). */
  readonly log?: LedgerLog;
}

/**
 * The runtime a long-running command (`worker`, `serve`) drives: agents and tools from the
 * configuration file, the database from `--database-url`, else `ONCELY_DATABASE_URL`, else the file's
 * `storage.database_url`, else the embedded default. A schema it does not know is refused.
 * `close()` closes the runtime and then its store.
 */
export async function runtimeFromConfig(
  flags: RuntimeFlags,
): Promise<{ runtime: Runtime; config: OncelyConfig; url: string; close(): Promise<void> }> {
  const config = await loadConfig(flags.config);
  const url = flags.databaseUrl ?? config.databaseUrl ?? DEFAULT_DATABASE_URL;
  const common = {
    agents: [...config.agents.values()],
    ...(flags.leaseMs === undefined ? {} : { leaseMs: flags.leaseMs }),
    ...config.runtime,
    ...(flags.log === undefined ? {} : { log: flags.log }),
  };
  if (flags.wrapStore === undefined) {
    const runtime = await openRuntime({ databaseUrl: url, ...common });
    return { runtime, config, url, close: () => runtime.close() };
  }
  const store = await openStore(url);
  const runtime = await openRuntime({ store: flags.wrapStore(store), ...common });
  const close = async (): Promise<void> => {
    try {
      await runtime.close();
    } finally {
      await store.close();
    }
  };
  return { runtime, config, url, close };
}
