import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { installedAiMajor } from '../../src/models/ai-runtime.js';
import { ROOT, waitFor } from '../support/processes.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';

const AI_SDK = installedAiMajor() ?? 6;

/** Processes driving their own agent loop: the AI SDK's generateText, and OpenAI Agents JS's run. */
const FIXTURES = [
  [`an AI SDK ${AI_SDK} loop`, join(ROOT, 'test/frameworks/fixtures/ai-sdk-refund.ts')],
  ['an OpenAI Agents run', join(ROOT, 'test/frameworks/fixtures/agents-refund.ts')],
] as const;

/** The model specification each fixture's model is of: the AI SDK loop's, the newest its SDK has. */
const SPECIFICATION: Readonly<Record<string, string | undefined>> = {
  [FIXTURES[0][1]]: AI_SDK >= 7 ? 'v4' : 'v3',
  [FIXTURES[1][1]]: undefined,
};

interface Loop {
  readonly output: () => string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(): void;
}

/** A real process driving its own AI SDK loop through oncely/ai-sdk. */
function startLoop(fixture: string, env: Record<string, string>): Loop {
  let output = '';
  const child = spawn(process.execPath, ['--import', 'tsx', fixture], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  return {
    output: () => output,
    exited: new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal }))),
    kill: () => child.kill('SIGKILL'),
  };
}

const lines = <T>(path: string): T[] =>
  existsSync(path)
    ? readFileSync(path, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as T)
    : [];

describe.each(
  FIXTURES.flatMap(([what, fixture]) => STORE_KINDS.map((kind) => [what, kind, fixture] as const)),
)('%s killed mid tool call, on %s', (_what, kind, fixture) => {
  let opened: OpenedStore;
  let dir: string;
  beforeEach(async () => {
    opened = await openTestStore(kind, 'loop-crash');
    dir = mkdtempSync(join(tmpdir(), 'oncely-ai-sdk-'));
  });
  afterEach(async () => {
    await opened.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  const files = (runId: string) => ({
    DATABASE: opened.url,
    RUN_ID: runId,
    BOOKS: join(dir, 'books.jsonl'),
    MODEL_LOG: join(dir, 'model.jsonl'),
  });

  /** Starts the loop, waits for the credit to be applied, and SIGKILLs the process before its record. */
  async function killAfterEffect(env: Record<string, string>): Promise<void> {
    const first = startLoop(fixture, { ...env, HANG: '1' });
    await waitFor(
      'the credit to be applied',
      () => Promise.resolve(first.output().includes('APPLIED') || undefined),
      30_000,
    );
    first.kill();
    expect((await first.exited).signal).toBe('SIGKILL');
  }

  it('restarted, it replays the recorded response, settles the call through its reconcile hook, and credits once', async () => {
    const env = { ...files('refund-crash-1'), RECONCILE: '1' };
    await killAfterEffect(env);
    const second = startLoop(fixture, env);
    const exit = await second.exited;
    expect(exit.code, second.output()).toBe(0);
    expect(second.output()).toContain('Done: $25 credited.');

    const credits = lines<{ key: string; pid: number }>(env.BOOKS);
    expect(credits).toHaveLength(1);
    expect(credits[0]?.key).toMatch(/^refund-crash-1:call_[0-9a-f]{16}$/);
    // Step 0 was asked once, before the kill; the restart replayed it and asked only step 1.
    const asked = lines<{ step: number; specification?: string }>(env.MODEL_LOG);
    expect(asked.map((m) => m.step)).toEqual([0, 1]);
    expect(asked.map((m) => m.specification)).toEqual([SPECIFICATION[fixture], SPECIFICATION[fixture]]);
    const record = await opened.store.ledger.get('acme', credits[0]!.key);
    expect(record?.status).toBe('completed');
    expect(record?.settledBy?.kind).toBe('reconcile');
    expect((await opened.store.loopSteps.list('acme', 'refund-crash-1')).map((s) => s.step)).toEqual([0, 1]);
  }, 90_000);

  it('restarted with no reconcile hook, the loop stops on the unknown call and never asks the model again', async () => {
    const env = files('refund-crash-2');
    await killAfterEffect(env);
    const second = startLoop(fixture, env);
    const exit = await second.exited;
    expect(exit.code, second.output()).toBe(3);
    expect(second.output()).toContain('RUN_CALL_UNKNOWN');

    const credits = lines<{ key: string }>(env.BOOKS);
    expect(credits).toHaveLength(1);
    expect(lines<{ step: number }>(env.MODEL_LOG).map((m) => m.step)).toEqual([0]);
    const record = await opened.store.ledger.get('acme', credits[0]!.key);
    expect(['started', 'indeterminate']).toContain(record?.status);
    expect(await opened.store.loopSteps.list('acme', 'refund-crash-2')).toHaveLength(1);
  }, 90_000);
});
