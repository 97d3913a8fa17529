/**
 * DBOS is a process-wide singleton: one `setConfig` + `launch`, one `shutdown`. Each DBOS case
 * acquires it in `open()` and releases it in `close()`. The first holder creates the system
 * database (`<scratch db>_dbos_sys`) and launches; the last one shuts down and drops it. So every
 * bench round launches DBOS afresh on an empty system database, and relaunching after a shutdown
 * works (check.ts does it once per case per round). Workflows are registered once, at import, as
 * DBOS requires (before the first launch); the registry survives shutdown because we do not pass
 * `deregister`. Should two DBOS cases ever be open at once, the second shares the first's launch
 * and system database.
 */
import { DBOS } from '@dbos-inc/dbos-sdk';
import { createDatabase, databaseName, dropDatabase } from './scratch-db.js';

interface Session {
  readonly serverUrl: string;
  readonly systemDb: string;
  readonly systemUrl: string;
  holders: number;
}

let session: Session | undefined;
let queue: Promise<unknown> = Promise.resolve();

/** Launch and shutdown must not interleave: run them one after another. */
function serial<T>(task: () => Promise<T>): Promise<T> {
  const result = queue.then(task);
  queue = result.catch(() => undefined);
  return result;
}

/** Launches DBOS on a system database beside `url` (or joins the launch in place). */
export function acquireDbos(url: string): Promise<{ systemUrl: string }> {
  return serial(async () => {
    if (session) {
      session.holders += 1;
      return { systemUrl: session.systemUrl };
    }
    const systemDb = `${databaseName(url)}_dbos_sys`;
    const systemUrl = await createDatabase(url, systemDb);
    try {
      DBOS.setConfig({
        name: 'oncely-bench-peer',
        // Fixed, so DBOS does not hash the workflow sources to derive one.
        applicationVersion: 'bench',
        systemDatabaseUrl: systemUrl,
        logLevel: 'warn',
      });
      await DBOS.launch();
    } catch (error) {
      await dropDatabase(url, systemDb);
      throw error;
    }
    session = { serverUrl: url, systemDb, systemUrl, holders: 1 };
    return { systemUrl };
  });
}

export function releaseDbos(): Promise<void> {
  return serial(async () => {
    const held = session;
    if (!held) return;
    held.holders -= 1;
    if (held.holders > 0) return;
    session = undefined;
    try {
      await DBOS.shutdown();
    } finally {
      await dropDatabase(held.serverUrl, held.systemDb);
    }
  });
}
