import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  defineAgent,
  defineTool,
  external,
  openRuntime,
  scriptedModel,
  write,
  type Runtime,
} from '../../src/index.js';
import { startWorker, type Worker, type WorkerLog } from '../../src/worker/index.js';
import { waitFor } from '../support/processes.js';
import { openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * A worker's log levels mean something: a completed run is info, a run waiting on an unknown call
 * is a warning (someone must settle it), a failed run is an error with its error code.
 */

interface Line {
  readonly level: 'info' | 'warn' | 'error';
  readonly fields: Record<string, unknown>;
  readonly message: string;
}

class Lines implements WorkerLog {
  readonly lines: Line[] = [];
  info(fields: Record<string, unknown>, message: string): void {
    this.lines.push({ level: 'info', fields, message });
  }
  warn(fields: Record<string, unknown>, message: string): void {
    this.lines.push({ level: 'warn', fields, message });
  }
  error(fields: Record<string, unknown>, message: string): void {
    this.lines.push({ level: 'error', fields, message });
  }
  endOf(runId: string): Line | undefined {
    return this.lines.find((l) => l.fields.runId === runId && l.message.startsWith('run is '));
  }
}

const note = defineTool({
  name: 'note',
  description: 'Write a note',
  input: z.object({ text: z.string() }),
  effect: write(),
  execute: () => ({ ok: true }),
});

/** A payment that never answers in time: its outcome is unknown. */
const pay = defineTool({
  name: 'pay',
  description: 'Pay a partner',
  input: z.object({ cents: z.number() }),
  effect: external(),
  timeoutMs: 50,
  execute: async () => {
    await sleep(2_000);
    return { paid: true };
  },
});

describe('worker log levels', () => {
  let opened: OpenedStore | undefined;
  let runtime: Runtime | undefined;
  let worker: Worker | undefined;
  afterEach(async () => {
    await worker?.stop();
    await runtime?.close();
    await opened?.cleanup();
  });

  it('a completed run is info, a run waiting on an unknown call a warning, a failed run an error with its code', async () => {
    opened = await openTestStore('sqlite', 'log_levels');
    const agents = [
      defineAgent({
        name: 'fine',
        instructions: 'Write one note.',
        model: scriptedModel([
          { toolCalls: [{ toolName: 'note', input: { text: 'hi' } }] },
          { text: 'Noted.' },
        ]),
        tools: [note],
      }),
      defineAgent({
        name: 'unsure',
        instructions: 'Pay once.',
        model: scriptedModel([
          { toolCalls: [{ toolName: 'pay', input: { cents: 100 } }] },
          { text: 'Paid.' },
        ]),
        tools: [pay],
        toolPolicy: { onIndeterminate: 'pause' },
      }),
      defineAgent({
        name: 'endless',
        instructions: 'Write notes.',
        model: scriptedModel([
          { toolCalls: [{ toolName: 'note', input: { text: 'a' } }] },
          { toolCalls: [{ toolName: 'note', input: { text: 'b' } }] },
          { text: 'Done.' },
        ]),
        tools: [note],
        maxSteps: 1,
      }),
    ];
    runtime = await openRuntime({ store: opened.store, agents });
    for (const agent of ['fine', 'unsure', 'endless']) {
      await runtime.startRun({ tenantId: 'acme', runId: `run_${agent}`, agent, input: 'go' });
    }
    const log = new Lines();
    worker = startWorker(runtime, { pollMs: 50, log, wakeups: false });
    await waitFor(
      'every run to end its drive',
      () => Promise.resolve(['fine', 'unsure', 'endless'].every((a) => log.endOf(`run_${a}`)) || undefined),
      20_000,
      50,
    );

    expect(log.endOf('run_fine')).toMatchObject({ level: 'info', fields: { status: 'completed' } });
    expect(log.endOf('run_unsure')).toMatchObject({
      level: 'warn',
      fields: { status: 'awaiting_reconciliation', tenantId: 'acme' },
    });
    expect(log.endOf('run_endless')).toMatchObject({
      level: 'error',
      message: 'run is failed',
      fields: { status: 'failed', code: 'RUN_MAX_STEPS', tenantId: 'acme' },
    });
    expect(String(log.endOf('run_endless')?.fields.reason)).not.toBe('');
  });
});
