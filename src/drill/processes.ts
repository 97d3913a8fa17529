import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The built CLI and the downstream entry point, beside this module in dist/. */
export const CLI = fileURLToPath(new URL('../cli/main.js', import.meta.url));
export const DOWNSTREAM_MAIN = fileURLToPath(new URL('./downstream-main.js', import.meta.url));

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** How much of a process's output is kept (its last bytes), for reports of what it said. */
const KEPT = 64 * 1024;

/**
 * A process the drill started: its output kept (the tail), its exit awaited, killed for sure when
 * the drill ends.
 */
export class DrillProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<Exit>;
  readonly startedAt = Date.now();
  stdout = '';
  stderr = '';
  #stopped = false;

  /**
   * `logDir`: its output is also written to `<logDir>/<name>-<pid>.log` (both streams), for a person
   * reading what a drill's processes said.
   */
  constructor(
    readonly name: string,
    args: readonly string[],
    env: Readonly<Record<string, string>>,
    logDir?: string,
    command: string = process.execPath,
  ) {
    this.child = spawn(command, args, {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const log: WriteStream | undefined =
      logDir === undefined
        ? undefined
        : createWriteStream(`${logDir}/${name.replace(/\W+/g, '-')}-${this.child.pid ?? 0}.log`);
    this.child.stdout?.on('data', (chunk: Buffer) => {
      this.stdout = (this.stdout + chunk.toString()).slice(-KEPT);
      log?.write(chunk);
    });
    this.child.stderr?.on('data', (chunk: Buffer) => {
      this.stderr = (this.stderr + chunk.toString()).slice(-KEPT);
      log?.write(chunk);
    });
    this.child.once('close', () => log?.end());
    this.exited = new Promise((resolve) => {
      this.child.once('exit', (code, signal) => resolve({ code, signal }));
      // It could not be started at all (no such program): said in its output, as an exit.
      this.child.once('error', (error) => {
        this.stderr += `${name} could not be started: ${error.message}\n`;
        resolve({ code: -1, signal: null });
      });
    });
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null && this.child.pid !== undefined;
  }

  /** Waits until its output holds `pattern`, or fails after `ms` (or at its exit). */
  async waitFor(pattern: RegExp, ms: number): Promise<RegExpExecArray> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = pattern.exec(this.stdout) ?? pattern.exec(this.stderr);
      if (found !== null) return found;
      if (!this.running)
        throw new Error(
          `${this.name} exited before it said ${String(pattern)}:\n${this.stderr.slice(-2000)}`,
        );
      if (Date.now() > deadline)
        throw new Error(
          `${this.name} did not say ${String(pattern)} within ${ms} ms:\n${this.stderr.slice(-2000)}`,
        );
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  signal(signal: NodeJS.Signals): boolean {
    if (!this.running) return false;
    return this.child.kill(signal);
  }

  /** SIGTERM, then SIGKILL if it has not exited within `ms`. */
  async stop(ms = 10_000): Promise<Exit> {
    if (this.#stopped || !this.running) return this.exited;
    this.#stopped = true;
    this.child.kill('SIGCONT');
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), ms);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  async kill(): Promise<Exit> {
    if (this.running) this.child.kill('SIGKILL');
    return this.exited;
  }
}
