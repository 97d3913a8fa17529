import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  Ledger,
  decideToolApproval,
  executeToolCall,
  executeToolCalls,
  resolveToolCall,
} from '../../src/calls/index.js';
import { isOncelyError, type OncelyError } from '../../src/errors/index.js';
import type { RepeatPolicy } from '../../src/ledger/index.js';
import type { Store } from '../../src/store/index.js';
import { defineTool, external, type ToolContext } from '../../src/tools/index.js';
import { STORE_KINDS, openTestStore, type OpenedStore } from '../support/stores.js';

/*
 * Repeats of guarded calls (executeToolCall): a call whose tool and identity equal an earlier call of
 * its conversation (or, without one, its run) that took effect or may have is refused before anything
 * is reserved: APPROVAL_REQUIRED (ask, the default; the approval names the earlier call),
 * TOOL_CALL_REPEAT (refuse; or waiting for an earlier call whose outcome is unknown). Each case counts
 * the calls that really ran and reads the ledger and the approvals.
 */

const TENANT = 'acme';
const CREDIT = { accountId: 'acct_9', amountCents: 2500 };

async function refusal(work: () => Promise<unknown>): Promise<OncelyError> {
  try {
    await work();
  } catch (error) {
    if (isOncelyError(error)) return error;
    throw error;
  }
  throw new Error('the call was not refused');
}

describe.each(STORE_KINDS)('repeats of guarded calls on %s', (kind) => {
  let opened: OpenedStore;
  let store: Store;
  let ledger: Ledger;
  let seq = 0;

  beforeAll(async () => {
    opened = await openTestStore(kind, 'calls_repeats');
    store = opened.store;
    ledger = new Ledger(store, {
      actorId: 'repeats-test',
      landingMarginMs: 0,
      log: { error: () => undefined },
    });
  });
  afterAll(async () => {
    await ledger.drain();
    await opened.cleanup();
  });

  const creditTool = (ran: string[], onRepeat?: RepeatPolicy, hang?: Promise<void>) =>
    defineTool({
      name: 'issue_credit',
      description: 'Credit an account',
      input: z.object({ accountId: z.string(), amountCents: z.number().int() }),
      effect: external(),
      timeoutMs: 50,
      ...(onRepeat === undefined ? {} : { onRepeat }),
      execute: async (args, ctx: ToolContext) => {
        ran.push(ctx.idempotencyKey);
        if (hang !== undefined) await hang;
        return { receipt: `rcpt_${ctx.toolCallId}`, ...args };
      },
    });
  const run = () => `run_rep_${++seq}`;
  const account = () => ({ ...CREDIT, accountId: `acct_${++seq}` });

  it('a new guarded call checks its repeats in its reservation: no read before it, unless the reservation finds one', async () => {
    const ran: string[] = [];
    const credit = creditTool(ran);
    const runId = run();
    const args = account();
    const reads: string[] = [];
    const watched = new Ledger(
      {
        ...store,
        ledger: new Proxy(store.ledger, {
          get(target, property, receiver) {
            const value: unknown = Reflect.get(target, property, receiver);
            if (typeof value !== 'function' || typeof property !== 'string') return value;
            return (...a: unknown[]) => {
              reads.push(property);
              return (value as (...b: unknown[]) => unknown).apply(target, a);
            };
          },
        }),
      },
      { actorId: 'repeats-test', landingMarginMs: 0, log: { error: () => undefined } },
    );
    await executeToolCall(watched, credit, args, { tenantId: TENANT, runId, toolCallId: 'c1' });
    expect(reads).toEqual(['reserveUnlessRepeat', 'transition']);
    reads.length = 0;
    // The same credit again: the reservation writes nothing, and the gate reads what it needs.
    const refused = await refusal(() =>
      executeToolCall(watched, credit, args, { tenantId: TENANT, runId, toolCallId: 'c2' }),
    );
    expect(refused.code).toBe('APPROVAL_REQUIRED');
    expect(reads[0]).toBe('reserveUnlessRepeat');
    expect(reads).toContain('repeatsOf');
    expect(reads).not.toContain('reserve');
    expect(ran).toEqual([`${runId}:c1`]);
    expect(await store.ledger.get(TENANT, `${runId}:c2`)).toBeUndefined();
  });

  it('does not re-open a failed call once an identical call of its run took effect meanwhile', async () => {
    const ran: string[] = [];
    const runId = run();
    const args = account();
    let first = true;
    const credit = defineTool({
      name: 'issue_credit',
      description: 'Credit an account',
      input: z.object({ accountId: z.string(), amountCents: z.number().int() }),
      effect: external(),
      timeoutMs: 50,
      execute: (a, ctx: ToolContext) => {
        ran.push(ctx.idempotencyKey);
        if (first) {
          first = false;
          throw new Error('connection reset after the request was sent');
        }
        return { receipt: `rcpt_${ctx.toolCallId}`, ...a };
      },
    });
    const g0 = { tenantId: TENANT, runId, toolCallId: 'g0' };
    expect((await executeToolCall(ledger, credit, args, g0)).status).toBe('unknown');
    // Its reconcile hook (the sweep's) finds it not taken: failed, and so no earlier call of a repeat.
    const key = `${runId}:g0`;
    const unknown = (await store.ledger.get(TENANT, key))!;
    const failed = await store.ledger.transition({
      tenantId: TENANT,
      idempotencyKey: key,
      via: 'reconcile',
      to: 'failed',
      expect: { status: unknown.status, version: unknown.version },
      actor: { kind: 'reconcile', id: 'sweep' },
      reason: 'the service has no such credit',
      recordIgnored: false,
    });
    expect(failed.applied).toBe(true);
    // The same credit under a new call goes out (nothing stood), and completes.
    expect((await executeToolCall(ledger, credit, args, { ...g0, toolCallId: 'g1' })).status).toBe(
      'completed',
    );
    await new Promise((resolve) => setTimeout(resolve, 60)); // g0's attempt can no longer land
    // g0 made again: re-opening it would be a second credit.
    const refused = await refusal(() => executeToolCall(ledger, credit, args, g0));
    expect(refused.code).toBe('TOOL_CALL_REPEAT');
    expect(refused.details).toMatchObject({ key, repeatOf: `${runId}:g1`, waiting: false });
    expect(ran).toEqual([key, `${runId}:g1`]);
    expect(await store.ledger.get(TENANT, key)).toMatchObject({ status: 'failed', attempt: 1 });
  });

  it('asks by default: the same credit again in the run is refused until approved, then runs once', async () => {
    const ran: string[] = [];
    const credit = creditTool(ran);
    const runId = run();
    const args = account();
    await executeToolCall(ledger, credit, args, { tenantId: TENANT, runId, toolCallId: 'c1' });
    const second = { tenantId: TENANT, runId, toolCallId: 'c2' };
    const asked = await refusal(() => executeToolCall(ledger, credit, args, second));
    expect(asked.code).toBe('APPROVAL_REQUIRED');
    expect(asked.message).toContain(`repeats tool call ${runId}:c1, which took effect`);
    expect(asked.details).toMatchObject({ repeatOf: `${runId}:c1` });
    expect(await store.runs.getApproval(TENANT, `${runId}:c2`)).toMatchObject({
      status: 'pending',
      repeatOf: `${runId}:c1`,
    });
    expect(await store.ledger.get(TENANT, `${runId}:c2`)).toBeUndefined();
    await decideToolApproval(ledger, 'approved', {
      tenantId: TENANT,
      idempotencyKey: `${runId}:c2`,
      actorId: 'ops-ana',
    });
    expect(await executeToolCall(ledger, credit, args, second)).toMatchObject({ status: 'completed' });
    expect(await executeToolCall(ledger, credit, args, second)).toMatchObject({ source: 'ledger' });
    expect(ran).toEqual([`${runId}:c1`, `${runId}:c2`]);
  });

  it('refuse: TOOL_CALL_REPEAT with the earlier outcome; nothing is reserved or asked', async () => {
    const ran: string[] = [];
    const credit = creditTool(ran);
    const runId = run();
    const args = account();
    await executeToolCall(ledger, credit, args, { tenantId: TENANT, runId, toolCallId: 'c1' });
    const refused = await refusal(() =>
      executeToolCall(
        ledger,
        credit,
        args,
        { tenantId: TENANT, runId, toolCallId: 'c2' },
        { onRepeat: 'refuse' },
      ),
    );
    expect(refused.code).toBe('TOOL_CALL_REPEAT');
    expect(refused.details).toMatchObject({
      repeatOf: `${runId}:c1`,
      waiting: false,
      earlier: { status: 'completed', result: { receipt: 'rcpt_c1', ...args } },
    });
    expect(await store.runs.getApproval(TENANT, `${runId}:c2`)).toBeUndefined();
    expect(ran).toEqual([`${runId}:c1`]);
  });

  it('the scope is the conversation when the caller names one, else the run', async () => {
    const ran: string[] = [];
    const credit = creditTool(ran, 'refuse');
    const args = account();
    const [one, two, three] = [run(), run(), run()];
    await executeToolCalls(ledger, [
      { tenantId: TENANT, runId: one, toolCallId: 'c1', tool: credit, args, conversationId: 'conv_1' },
    ]);
    const inConversation = await refusal(() =>
      executeToolCalls(ledger, [
        { tenantId: TENANT, runId: two, toolCallId: 'c1', tool: credit, args, conversationId: 'conv_1' },
      ]),
    );
    expect(inConversation.details).toMatchObject({ repeatOf: `${one}:c1` });
    // Another run, no conversation named: not the same scope.
    await executeToolCall(ledger, credit, args, { tenantId: TENANT, runId: three, toolCallId: 'c1' });
    expect(ran).toEqual([`${one}:c1`, `${three}:c1`]);
  });

  it('waits for an earlier call whose outcome is unknown; settled failed, the repeat runs', async () => {
    const ran: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const runId = run();
    const args = account();
    const first = await executeToolCall(ledger, creditTool(ran, undefined, held), args, {
      tenantId: TENANT,
      runId,
      toolCallId: 'c1',
    });
    expect(first.status).toBe('unknown');
    const credit = creditTool(ran);
    const second = { tenantId: TENANT, runId, toolCallId: 'c2' };
    const waiting = await refusal(() => executeToolCall(ledger, credit, args, second));
    expect(waiting.code).toBe('TOOL_CALL_REPEAT');
    expect(waiting.details).toMatchObject({ repeatOf: `${runId}:c1`, waiting: true });
    await resolveToolCall(ledger, {
      tenantId: TENANT,
      idempotencyKey: `${runId}:c1`,
      status: 'failed',
      reason: 'not in the books',
      actorId: 'ops-ana',
      force: true,
    });
    expect(await executeToolCall(ledger, credit, args, second)).toMatchObject({ status: 'completed' });
    expect(ran).toEqual([`${runId}:c1`, `${runId}:c2`]);
    release(); // the first attempt answers at last: its late outcome is a conflict, loudly
  });

  it('two identical calls in one batch are refused together, naming the first', async () => {
    const ran: string[] = [];
    const credit = creditTool(ran);
    const runId = run();
    const args = account();
    const refused = await refusal(() =>
      executeToolCalls(ledger, [
        { tenantId: TENANT, runId, toolCallId: 'c1', tool: credit, args },
        { tenantId: TENANT, runId, toolCallId: 'c2', tool: credit, args },
      ]),
    );
    expect(refused.code).toBe('TOOL_CALL_REPEAT');
    expect(refused.message).toContain('of the same batch');
    expect(ran).toEqual([]);
  });

  it('a tenant-wide window holds when two callers make the same call at the same instant: one runs, the other is asked', async () => {
    const ran: string[] = [];
    const credit = defineTool({
      name: 'issue_credit',
      description: 'Credit an account',
      input: z.object({ accountId: z.string(), amountCents: z.number().int() }),
      effect: external(),
      repeatWindowMs: 60_000,
      execute: (args, ctx: ToolContext) => {
        ran.push(ctx.idempotencyKey);
        return { receipt: `rcpt_${ctx.runId}`, ...args };
      },
    });
    // Both callers look for earlier calls before either reserves: each finds none.
    let looked = 0;
    let bothLooked!: () => void;
    const barrier = new Promise<void>((resolve) => (bothLooked = resolve));
    const ledgerStore = store.ledger;
    const racing = new Proxy(store, {
      get: (target, name, receiver) =>
        name !== 'ledger'
          ? (Reflect.get(target, name, receiver) as unknown)
          : new Proxy(ledgerStore, {
              get: (l, method, r) =>
                method !== 'repeatsOf'
                  ? (Reflect.get(l, method, r) as unknown)
                  : async (...args: Parameters<Store['ledger']['repeatsOf']>) => {
                      const found = await ledgerStore.repeatsOf(...args);
                      if (++looked === 2) bothLooked();
                      await barrier;
                      return found;
                    },
            }),
    });
    const raceLedger = new Ledger(racing, { actorId: 'racer', landingMarginMs: 0 });
    const args = account();
    const [a, b] = [run(), run()];
    const results = await Promise.allSettled([
      executeToolCall(raceLedger, credit, args, { tenantId: TENANT, runId: a, toolCallId: 'c1' }),
      executeToolCall(raceLedger, credit, args, { tenantId: TENANT, runId: b, toolCallId: 'c1' }),
    ]);
    expect(
      ran,
      JSON.stringify(results.map((r) => (r.status === 'rejected' ? String(r.reason) : r.value.status))),
    ).toHaveLength(1);
    // The other is a repeat of it: asked about (the winner completed), or waiting for it (still running).
    const refused = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(refused?.reason).toMatchObject({ details: { repeatOf: ran[0] } });
    expect(['APPROVAL_REQUIRED', 'TOOL_CALL_REPEAT']).toContain((refused?.reason as OncelyError).code);
    const loser = ran[0] === `${a}:c1` ? `${b}:c1` : `${a}:c1`;
    expect(await store.ledger.get(TENANT, loser)).toBeUndefined();
    // Once the winner is known to have taken effect, the loser's next try is asked about.
    expect(
      await refusal(() =>
        executeToolCall(raceLedger, credit, args, {
          tenantId: TENANT,
          runId: loser.split(':')[0]!,
          toolCallId: 'c1',
        }),
      ),
    ).toMatchObject({ code: 'APPROVAL_REQUIRED', details: { repeatOf: ran[0] } });
    expect(ran).toHaveLength(1);
  });

  it('allow: the same credit runs twice', async () => {
    const ran: string[] = [];
    const credit = creditTool(ran, 'allow');
    const runId = run();
    const args = account();
    await executeToolCall(ledger, credit, args, { tenantId: TENANT, runId, toolCallId: 'c1' });
    await executeToolCall(ledger, credit, args, { tenantId: TENANT, runId, toolCallId: 'c2' });
    expect(ran).toHaveLength(2);
  });
});
