import { executeToolCall, executeToolCalls, type Ledger } from '../src/calls/index.js';
import { isOncelyError } from '../src/errors/index.js';
import type { GuardedPlan, GuardedStep } from './plan.js';
import { TENANT, type World } from './world.js';

/*
 * A caller of guarded calls (`executeToolCall` / `executeToolCalls`, what the AI SDK adapter and
 * direct users call) on the same billing service the runs credit. It lives in a worker process (its
 * store calls wait at that process's gates: it dies, freezes and is cut off with it) and, started
 * again with the process, makes its calls again from the first, with the same tool call ids: the
 * replay after a crash. Its steps repeat one another (same arguments, a new tool call id) under an
 * `ask`, `refuse` or `allow` policy, given as the tool's or as the call's; some in one conversation
 * across two run ids. A call not settled yet (unknown, waiting for an approval or an earlier call,
 * the store unreachable) is made again, same key, on the caller's next passes.
 */

/** The caller's one conversation: a scope of repeats across its run ids. */
export const GUARD_CONVERSATION = 'guard_conv';
const PASSES = 4;
const PASS_PAUSE_MS = 800;

export interface GuardedCall {
  readonly runId: string;
  readonly toolCallId: string;
  readonly key: string;
  readonly step: GuardedStep;
}

/** The calls a plan's steps make, in order: a replay step is the step before made again. */
export function guardedCalls(plan: GuardedPlan): GuardedCall[] {
  const calls: GuardedCall[] = [];
  plan.steps.forEach((step, i) => {
    const before = calls[calls.length - 1];
    if (step.replay && before !== undefined) {
      calls.push(before);
      return;
    }
    const runId = `guard_${step.run}`;
    const toolCallId = `g${i}`;
    calls.push({ runId, toolCallId, key: `${runId}:${toolCallId}`, step });
  });
  return calls;
}

/** The repeat policy of each guarded call's key. */
export function guardedPolicies(plan: GuardedPlan | undefined): Map<string, GuardedStep['onRepeat']> {
  return new Map((plan === undefined ? [] : guardedCalls(plan)).map((c) => [c.key, c.step.onRepeat]));
}

/** Codes of a refusal that is final for this key: made again, it is refused again. */
const FINAL = new Set(['APPROVAL_REJECTED', 'LEDGER_ARGS_MISMATCH']);

/** Runs the caller's steps; resolves when it has done all it will do. */
export async function runGuardedCaller(
  plan: GuardedPlan,
  world: World,
  ledger: Ledger,
  note: (what: string) => void,
): Promise<void> {
  const calls = guardedCalls(plan);
  const tools = new Map(
    (['ask', 'refuse', 'allow'] as const).map((policy) => [policy, world.creditTool(policy)]),
  );
  const plain = world.creditTool();
  const lookup = world.tools().find((t) => t.name === 'lookup_order')!;
  const open = new Set(calls.map((_, i) => i));
  for (let pass = 0; pass < PASSES && open.size > 0; pass += 1) {
    if (pass > 0) await ledger.clock.sleep(PASS_PAUSE_MS);
    for (const i of [...open]) {
      const { runId, toolCallId, key, step } = calls[i]!;
      const tool = step.via === 'tool' ? tools.get(step.onRepeat)! : plain;
      const options = step.via === 'options' ? { onRepeat: step.onRepeat } : {};
      const args = { accountId: `acct_guard_${step.account}`, amountCents: 1500 };
      const identity = {
        runId,
        toolCallId,
        tenantId: TENANT,
        ...(step.inConversation ? { conversationId: GUARD_CONVERSATION } : {}),
      };
      try {
        const [outcome] =
          step.batch || step.inConversation
            ? await executeToolCalls(
                ledger,
                [
                  { ...identity, tool, args },
                  ...(step.batch
                    ? [
                        {
                          ...identity,
                          toolCallId: `${toolCallId}_read`,
                          tool: lookup,
                          args: { orderId: key },
                        },
                      ]
                    : []),
                ],
                options,
              )
            : [await executeToolCall(ledger, tool, args, identity, options)];
        note(`guarded ${key}: ${outcome?.status ?? 'no outcome'}`);
        if (outcome?.status !== 'unknown') open.delete(i);
      } catch (error) {
        const code = isOncelyError(error) ? error.code : String(error);
        const waiting =
          isOncelyError(error) &&
          error.code === 'TOOL_CALL_REPEAT' &&
          (error.details as { waiting?: boolean } | undefined)?.waiting === true;
        note(`guarded ${key}: ${code}${waiting ? ' (waiting)' : ''}`);
        if (FINAL.has(code) || (code === 'TOOL_CALL_REPEAT' && !waiting)) open.delete(i);
      }
    }
  }
}
