import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { createTestDatabase, tempSqlitePath } from './databases.js';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** A spawned `oncely` process (the built CLI), its output kept for assertions and failure messages. */
export class OncelyProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<Exit>;
  stdout = '';
  stderr = '';

  constructor(args: readonly string[], env: Record<string, string | undefined>, cwd = ROOT) {
    this.child = spawn(process.execPath, [CLI, ...args], {
      cwd,
      env: { ...process.env, ONCELY_CRASH_AT: undefined, ONCELY_CRASH_SKIP: undefined, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.child.stdout?.on('data', (chunk: Buffer) => (this.stdout += chunk.toString('utf8')));
    this.child.stderr?.on('data', (chunk: Buffer) => (this.stderr += chunk.toString('utf8')));
    this.exited = new Promise((resolve) => {
      this.child.once('exit', (code, signal) => resolve({ code, signal }));
    });
  }

  get pid(): number {
    const pid = this.child.pid;
    if (pid === undefined) throw new Error('the process did not start');
    return pid;
  }

  /** Waits for the exit, killing the process (and failing) if it takes longer than `ms`. */
  async exit(ms: number): Promise<Exit> {
    const timer = sleep(ms).then(() => 'timeout' as const);
    const result = await Promise.race([this.exited, timer]);
    if (result !== 'timeout') return result;
    this.child.kill('SIGKILL');
    await this.exited;
    throw new Error(`process did not exit within ${ms} ms\nstderr:\n${this.stderr}\nstdout:\n${this.stdout}`);
  }

  /** SIGTERM, then wait for a graceful exit. */
  async stop(ms = 20_000): Promise<Exit> {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGTERM');
    return this.exit(ms);
  }

  /**
   * SIGTERM, and fails (with what the process printed) unless it exits 0 within `ms`: a graceful
   * stop is part of what a crash test checks, and a failure should show the process's own account.
   */
  async stopsCleanly(ms = 20_000): Promise<void> {
    const exit = await this.stop(ms);
    if (exit.code === 0 && exit.signal === null) return;
    throw new Error(
      `expected a clean exit (code 0), got ${JSON.stringify(exit)}\nstderr:\n${this.stderr}\nstdout:\n${this.stdout}`,
    );
  }

  /** Kills it for good, whatever state it is in (a test's cleanup). */
  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
    await this.exited;
  }
}

/** Polls `probe` until it returns a value other than undefined, or throws after `ms`. */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  ms: number,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** Waits (20 s at most) for `oncely serve` to log where it listens; its address. */
export function servingAddress(proc: OncelyProcess): Promise<string> {
  return waitFor(
    'oncely serve to listen',
    () => {
      if (proc.child.exitCode !== null)
        throw new Error(`serve exited ${proc.child.exitCode}: ${proc.stderr}`);
      const line = proc.stderr.split('\n').find((l) => l.includes('serving the oncely API'));
      return Promise.resolve(
        line === undefined ? undefined : (JSON.parse(line) as { address: string }).address,
      );
    },
    20_000,
  );
}

/**
 * `oncely keys create` on the database; the key it printed. With `create`, a missing SQLite file is
 * made (`--create`); without it the database must exist.
 */
export async function createKeyWithCli(
  databaseUrl: string,
  key: { tenant: string; actor: string; role: string },
  options: { create?: boolean } = {},
): Promise<string> {
  const proc = new OncelyProcess(
    [
      'keys',
      'create',
      '--tenant',
      key.tenant,
      '--actor',
      key.actor,
      '--role',
      key.role,
      '--database-url',
      databaseUrl,
      ...(options.create === true ? ['--create'] : []),
    ],
    {},
  );
  const exit = await proc.exit(20_000);
  if (exit.code !== 0) throw new Error(`keys create exited ${exit.code}: ${proc.stderr}`);
  return proc.stdout.split('\n')[0]!;
}

/** A migrated store of its own and an `oncely serve` on it, for tests that drive the server from outside. */
export interface ServedStore {
  /** The store's URL (`sqlite:<file>` or a PostgreSQL database of its own). */
  readonly url: string;
  /** The server's base URL. */
  readonly base: string;
  readonly proc: OncelyProcess;
  /** Stops the server, then drops the store. */
  readonly stop: () => Promise<void>;
}

/**
 * A fresh SQLite file or PostgreSQL database (named after `label`), migrated with `oncely migrate
 * --create`, then `oncely serve --config <config>` on it (port 0, polled every 100 ms), with `env`.
 */
export async function serveFreshStore(
  kind: 'sqlite' | 'postgres',
  label: string,
  config: string,
  env: Record<string, string> = {},
): Promise<ServedStore> {
  let url: string;
  let drop: () => Promise<void>;
  if (kind === 'sqlite') {
    const file = tempSqlitePath(label);
    url = `sqlite:${file.path}`;
    drop = () => Promise.resolve(file.cleanup());
  } else {
    const db = await createTestDatabase(label.replace(/-/g, '_'));
    url = db.url;
    drop = () => db.drop();
  }
  const migrate = new OncelyProcess(['migrate', '--create', '--database-url', url], {});
  const migrated = await migrate.exit(30_000);
  if (migrated.code !== 0) {
    await drop();
    throw new Error(`migrate exited ${migrated.code}: ${migrate.stderr}`);
  }
  const proc = new OncelyProcess(
    ['serve', '--config', config, '--database-url', url, '--port', '0', '--poll-ms', '100'],
    env,
  );
  const base = await servingAddress(proc).catch(async (error: unknown) => {
    await proc.stop();
    await drop();
    throw error;
  });
  return {
    url,
    base,
    proc,
    stop: async () => {
      await proc.stop();
      await drop();
    },
  };
}
