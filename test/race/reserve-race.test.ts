import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Ledger } from '../../src/calls/index.js';
import { executeToolCall, openLedger } from '../../src/calls/index.js';
import { ToolNotAttemptedError } from '../../src/errors/index.js';
import { defineTool, external } from '../../src/tools/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';

/*
 * 16 OS processes, each with its own connection to one store, call executeToolCall on one key at
 * the same moment. The ledger must let exactly one of them run the tool; the downstream file counts
 * what really ran.
 */

const RACERS = 16;
const TOOL_NAME = 'race_credit';
const ARGS = { amountCents: 2500 };
const EXECUTE_MS = 300;
const READY_TIMEOUT_MS = 90_000;
const ROUND_TIMEOUT_MS = 30_000;
const EXIT_TIMEOUT_MS = 20_000;
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const STORES = ['sqlite', 'postgres'] as const;
type StoreName = (typeof STORES)[number];

interface RaceResult {
  readonly pid: number;
  readonly status: 'completed' | 'failed' | 'unknown' | 'compensated';
  readonly source: 'executed' | 'ledger' | 'reconcile' | null;
  readonly value: unknown;
  readonly record: { readonly status: string; readonly attempt: number; readonly version: number };
}

interface DownstreamLine {
  readonly pid: number;
  readonly key: string;
  readonly attempt: number;
}

/** One child process, read line by line; a child that dies rejects whoever waits on it. */
class Racer {
  readonly process: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private readonly lines: string[] = [];
  private waiter: ((line: string | undefined) => void) | undefined;
  private done = false;
  private stderr = '';

  constructor(config: string) {
    this.process = spawn(process.execPath, ['--import', 'tsx', 'test/race/race-child.ts', config], {
      cwd: ROOT,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    // A child that died closes its stdin; writing to it then must not crash the test process.
    this.process.stdin?.on('error', () => undefined);
    this.process.stderr?.on('data', (chunk: Buffer) => (this.stderr += chunk.toString('utf8')));
    if (this.process.stdout === null) throw new Error('child has no stdout');
    createInterface({ input: this.process.stdout }).on('line', (line) => {
      if (this.waiter === undefined) this.lines.push(line);
      else this.waiter(line);
    });
    this.exited = new Promise((resolve) => {
      this.process.once('exit', (code, signal) => {
        this.done = true;
        this.waiter?.(undefined);
        resolve({ code, signal });
      });
    });
  }

  get running(): boolean {
    return !this.done;
  }

  send(line: string): void {
    this.process.stdin?.write(`${line}\n`);
  }

  /** The next stdout line, or a rejection naming the child's stderr if it exits or stays silent. */
  next(timeoutMs: number): Promise<string> {
    const queued = this.lines.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    if (this.done) return Promise.reject(this.failure('exited'));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = undefined;
        reject(this.failure(`said nothing for ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiter = (line) => {
        clearTimeout(timer);
        this.waiter = undefined;
        if (line === undefined) reject(this.failure('exited'));
        else resolve(line);
      };
    });
  }

  async expect(prefix: string, timeoutMs: number): Promise<string> {
    const line = await this.next(timeoutMs);
    if (!line.startsWith(prefix)) throw this.failure(`printed ${JSON.stringify(line)}, expected ${prefix}`);
    return line.slice(prefix.length);
  }

  private failure(what: string): Error {
    return new Error(`race child ${this.process.pid ?? '?'} ${what}; stderr:\n${this.stderr}`);
  }
}

const withTimeout = <T>(promise: Promise<T>, ms: number, what: string): Promise<T> =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });

let racers: Racer[] = [];
const ledgers = new Map<StoreName, Ledger>();
const cleanups: (() => Promise<void> | void)[] = [];
let workDir = '';
let rounds = 0;

beforeAll(async () => {
  workDir = mkdtempSync(join(tmpdir(), 'oncely-t-race-'));
  cleanups.push(() => rmSync(workDir, { recursive: true, force: true }));
  const sqlite = tempSqlitePath('reserve-race');
  cleanups.push(() => sqlite.cleanup());
  const pg = await createTestDatabase('reserve-race');
  cleanups.push(() => pg.drop());
  const urls: Record<StoreName, string> = { sqlite: `sqlite:${sqlite.path}`, postgres: pg.url };
  // The parent migrates; the children refuse a schema they do not know, so they open with migrate: false.
  for (const name of STORES)
    ledgers.set(name, await openLedger(urls[name], { migrate: true, actorId: 'race-parent' }));

  const config = JSON.stringify({ stores: urls, toolName: TOOL_NAME, executeMs: EXECUTE_MS });
  racers = Array.from({ length: RACERS }, () => new Racer(config));
  await Promise.all(racers.map((r) => r.expect('ready', READY_TIMEOUT_MS)));
});

afterAll(async () => {
  for (const racer of racers) if (racer.running) racer.process.kill('SIGKILL');
  await Promise.all(racers.map((r) => r.exited));
  for (const ledger of ledgers.values()) await ledger.close();
  for (const cleanup of cleanups.reverse()) await cleanup();
});

/** Every racer is idle on stdin (the barrier); each gets `go` at once and answers with its outcome. */
async function race(
  store: StoreName,
  tenantId: string,
  toolCallId: string,
): Promise<{
  results: RaceResult[];
  downstream: DownstreamLine[];
}> {
  const downstream = join(workDir, `downstream-${++rounds}.log`);
  const go = JSON.stringify({ store, tenantId, runId: 'run_1', toolCallId, args: ARGS, downstream });
  for (const racer of racers) racer.send(`go ${go}`);
  const results = await Promise.all(
    racers.map(async (r) => JSON.parse(await r.expect('result ', ROUND_TIMEOUT_MS)) as RaceResult),
  );
  const lines = existsSync(downstream)
    ? readFileSync(downstream, 'utf8')
        .split('\n')
        .filter((l) => l !== '')
    : [];
  return { results, downstream: lines.map((l) => JSON.parse(l) as DownstreamLine) };
}

/** Exactly one racer ran the tool, as `attempt`; everyone else was told unknown or the recorded result. */
function assertOneExecution(
  results: readonly RaceResult[],
  downstream: readonly DownstreamLine[],
  key: string,
  attempt: number,
): void {
  expect(results).toHaveLength(RACERS);
  expect(downstream).toHaveLength(1);
  expect(downstream[0]).toMatchObject({ key, attempt });
  const executed = results.filter((r) => r.status === 'completed' && r.source === 'executed');
  expect(executed).toHaveLength(1);
  const winner = executed[0];
  expect(winner?.pid).toBe(downstream[0]?.pid);
  const expectedValue = { receipt: `rcpt-${winner?.pid}-${attempt}`, amountCents: ARGS.amountCents };
  expect(winner?.value).toEqual(expectedValue);
  for (const r of results) {
    if (r === winner) continue;
    const inFlight = r.status === 'unknown' && r.record.status === 'started';
    const replayed = r.status === 'completed' && r.source === 'ledger';
    expect(inFlight || replayed, `racer ${r.pid} was told ${JSON.stringify(r)}`).toBe(true);
    if (replayed) expect(r.value).toEqual(expectedValue);
    expect(r.record.attempt).toBe(attempt);
  }
}

describe.each(STORES)('16 processes reserving one key (%s)', (store) => {
  const ledger = (): Ledger => {
    const found = ledgers.get(store);
    if (found === undefined) throw new Error(`no ${store} ledger`);
    return found;
  };

  it('let exactly one of them run a new call', async () => {
    const tenantId = `race-new-${store}`;
    const { results, downstream } = await race(store, tenantId, 'call_new');
    assertOneExecution(results, downstream, 'run_1:call_new', 1);

    const records = await ledger().store.ledger.list(tenantId, { limit: 10 });
    expect(records.map((r) => [r.idempotencyKey, r.status, r.attempt])).toEqual([
      ['run_1:call_new', 'completed', 1],
    ]);
    const history = await ledger().store.ledger.history(tenantId, 'run_1:call_new');
    expect(history.map((e) => [e.kind, e.via, e.from, e.to, e.attempt])).toEqual([
      ['transition', 'reserve', null, 'started', 1],
      ['transition', 'outcome', 'started', 'completed', 1],
    ]);
  });

  it('let exactly one of them re-run a failed call, as attempt 2', async () => {
    const tenantId = `race-failed-${store}`;
    const refusing = defineTool({
      name: TOOL_NAME,
      description: 'the same tool while the billing token was expired',
      input: z.object({ amountCents: z.number().int() }),
      effect: external(),
      execute: () => {
        throw new ToolNotAttemptedError('the billing token expired; nothing was sent');
      },
    });
    const first = await executeToolCall(ledger(), refusing, ARGS, {
      tenantId,
      runId: 'run_1',
      toolCallId: 'call_failed',
    });
    expect(first).toMatchObject({ status: 'failed', record: { status: 'failed', attempt: 1 } });

    const { results, downstream } = await race(store, tenantId, 'call_failed');
    assertOneExecution(results, downstream, 'run_1:call_failed', 2);

    const records = await ledger().store.ledger.list(tenantId, { limit: 10 });
    expect(records.map((r) => [r.idempotencyKey, r.status, r.attempt])).toEqual([
      ['run_1:call_failed', 'completed', 2],
    ]);
    const history = await ledger().store.ledger.history(tenantId, 'run_1:call_failed');
    expect(history.map((e) => [e.kind, e.via, e.from, e.to, e.attempt])).toEqual([
      ['transition', 'reserve', null, 'started', 1],
      ['transition', 'outcome', 'started', 'failed', 1],
      ['transition', 'reserve', 'failed', 'started', 2],
      ['transition', 'outcome', 'started', 'completed', 2],
    ]);
  });
});

describe('the racers', () => {
  it('all close their ledgers and exit 0', async () => {
    for (const racer of racers) racer.send('exit');
    const exits = await withTimeout(
      Promise.all(racers.map((r) => r.exited)),
      EXIT_TIMEOUT_MS,
      'racers exiting',
    );
    expect(exits).toEqual(racers.map(() => ({ code: 0, signal: null })));
  });
});
