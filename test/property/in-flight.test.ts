import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ledger, executeToolCall } from '../../src/calls/index.js';
import { ToolNotAttemptedError } from '../../src/errors/index.js';
import type { Store } from '../../src/store/index.js';
import { defineTool, external } from '../../src/tools/index.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * The ledger's model, extended with attempts in flight and late outcomes, through the guarded call:
 * a tool whose requests sit on the wire until the test lets them land (an effect), fizzle (refused
 * before anything was sent) or drop (the answer is lost), on a downstream that cannot take a key,
 * with a reconcile hook that tells the truth about what has landed so far. Under any interleaving of
 * calls, landings, losses and time passing: no two executions of one key are ever in flight at once,
 * no key takes effect twice, no outcome is ever a conflict, and once everything has settled a call
 * is completed exactly when it took effect.
 */

const TENANT = 'acme';
const KEYS = ['k0', 'k1'] as const;
type Call = (typeof KEYS)[number];
const TIMEOUT_MS = 15;

interface Wire {
  readonly key: string;
  land(): void;
  fizzle(): void;
  drop(): void;
}

interface World {
  readonly ledger: Ledger;
  readonly store: Store;
  readonly runId: string;
  readonly wires: Wire[];
  readonly effects: Map<string, number>;
  readonly running: Map<string, number>;
  readonly violations: string[];
  readonly tool: ReturnType<typeof makeTool>;
}

function makeTool(world: () => World) {
  return defineTool({
    name: 'send_sms',
    description: 'Send an SMS (the gateway cannot take a key)',
    input: z.object({ to: z.string() }),
    effect: external(),
    timeoutMs: TIMEOUT_MS,
    downstreamAcceptsKey: false,
    // Its keys are separate calls of the same SMS on purpose: this property is about one key's
    // attempts, not about the model's repeats (test/calls/repeats.test.ts).
    onRepeat: 'allow',
    reconcile: (record) =>
      (world().effects.get(record.idempotencyKey) ?? 0) > 0
        ? { status: 'completed', value: { sent: true } }
        : { status: 'failed', reason: 'nothing at the gateway under this reference' },
    execute: (_args, ctx) => {
      const w = world();
      const key = ctx.idempotencyKey;
      if ((w.running.get(key) ?? 0) > 0)
        w.violations.push(`${key}: attempt ${ctx.attempt} began while one was in flight`);
      w.running.set(key, (w.running.get(key) ?? 0) + 1);
      const done = (): void => {
        w.running.set(key, (w.running.get(key) ?? 1) - 1);
      };
      // It ignores its signal: only the ledger's own bookkeeping stands between it and a second run.
      return new Promise((resolve, reject) => {
        w.wires.push({
          key,
          land: () => {
            w.effects.set(key, (w.effects.get(key) ?? 0) + 1);
            if ((w.effects.get(key) ?? 0) > 1) w.violations.push(`${key}: took effect twice`);
            done();
            resolve({ sent: true });
          },
          fizzle: () => {
            done();
            reject(new ToolNotAttemptedError('the gateway refused before sending'));
          },
          drop: () => {
            done();
            reject(new Error('connection reset; the answer is lost'));
          },
        });
      });
    },
  });
}

type Command = fc.AsyncCommand<object, World>;

class CallCommand implements Command {
  constructor(readonly call: Call) {}
  check = (): boolean => true;
  async run(_m: object, w: World): Promise<void> {
    await executeToolCall(
      w.ledger,
      w.tool,
      { to: '+15550100' },
      { tenantId: TENANT, runId: w.runId, toolCallId: this.call },
    );
    expect(w.violations).toEqual([]);
  }
  toString = (): string => `call(${this.call})`;
}

class WireCommand implements Command {
  constructor(
    readonly pick: number,
    readonly what: 'land' | 'fizzle' | 'drop',
  ) {}
  check = (): boolean => true;
  async run(_m: object, w: World): Promise<void> {
    const wire = w.wires.length === 0 ? undefined : w.wires.splice(this.pick % w.wires.length, 1)[0];
    wire?.[this.what]();
    await sleep(5); // the late outcome is written
    expect(w.violations).toEqual([]);
  }
  toString = (): string => `${this.what}(#${this.pick})`;
}

class WaitCommand implements Command {
  check = (): boolean => true;
  async run(): Promise<void> {
    await sleep(TIMEOUT_MS + 5); // attempts that have answered can no longer land by their age
  }
  toString = (): string => 'wait';
}

const COMMANDS = [
  fc.constantFrom(...KEYS).map((c) => new CallCommand(c)),
  fc.constantFrom(...KEYS).map((c) => new CallCommand(c)),
  fc
    .tuple(fc.nat({ max: 5 }), fc.constantFrom('land' as const, 'fizzle' as const, 'drop' as const))
    .map(([p, what]) => new WireCommand(p, what)),
  fc.constant(new WaitCommand()),
];

describe.each(STORE_KINDS)('attempts in flight and late outcomes, against the guarded call (%s)', (kind) => {
  let opened: OpenedStore;
  let runs = 0;

  beforeAll(async () => {
    opened = await openTestStore(kind, 'in_flight_model');
  });
  afterAll(() => opened.cleanup());

  it('never runs a key while an attempt of it is in flight, never takes effect twice, never conflicts', async () => {
    const ledger = new Ledger(opened.store, {
      actorId: 'in-flight-model',
      landingMarginMs: 0,
      log: { error: () => undefined },
    });
    await fc.assert(
      fc.asyncProperty(fc.commands(COMMANDS, { maxCommands: 25, size: 'max' }), async (commands) => {
        const holder: { world?: World } = {};
        const tool = makeTool(() => {
          if (holder.world === undefined) throw new Error('the world is not made yet');
          return holder.world;
        });
        const world: World = {
          ledger,
          store: opened.store,
          runId: `model_${process.pid}_${++runs}`,
          wires: [],
          effects: new Map(),
          running: new Map(),
          violations: [],
          tool,
        };
        holder.world = world;
        await fc.asyncModelRun(() => ({ model: {}, real: world }), commands);
        // Whatever is still on the wire is lost now; then every late outcome is written.
        for (const wire of world.wires.splice(0)) wire.drop();
        await ledger.drain();
        expect(world.violations).toEqual([]);
        for (const call of KEYS) {
          const key = `${world.runId}:${call}`;
          const record = await opened.store.ledger.get(TENANT, key);
          if (record === undefined) continue;
          const effects = world.effects.get(key) ?? 0;
          expect(effects).toBeLessThanOrEqual(1);
          if (record.status === 'completed') expect(effects).toBe(1);
          if (effects === 1) expect(record.status).toBe('completed');
          expect(record.conflictAt).toBeNull();
          expect(record.attempt).toBeLessThanOrEqual(3);
          const history = await opened.store.ledger.history(TENANT, key);
          expect(history.filter((e) => e.kind === 'conflict')).toEqual([]);
        }
      }),
      { numRuns: 20 },
    );
    await ledger.drain();
  });
});
