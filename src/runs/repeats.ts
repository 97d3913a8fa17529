import type { PreparedCall } from '../calls/index.js';
import { earlierOf, earlierState, type ToolExecutionRecord } from '../ledger/index.js';
import { repeatPolicyOf } from '../agents/index.js';
import type { PlanContext } from './plan-step.js';

/*
 * Catching the model's repeats in a run's step (DESIGN §6, the fourth way): before a new call that
 * changes something is reserved, an earlier call of its scope with the same tool and identity (the
 * repeat digest) that took effect or may have makes it a repeat, and the decision table says what
 * happens to it. The scope is the run (every turn of its conversation), or the tenant within the
 * tool's `repeatWindowMs`. A call of the same step made first counts as an earlier call too.
 */

/** An earlier call a new call repeats. */
export interface FoundRepeat {
  readonly earlierKey: string;
  /** Its record; undefined for a call of this step not yet made (it is waited for). */
  readonly earlier?: ToolExecutionRecord;
  readonly state: 'standing' | 'unknown';
  readonly policy: 'ask' | 'refuse';
}

export interface Repeats {
  /** What the call repeats, if anything, under a policy other than `allow`. */
  of(call: PreparedCall): FoundRepeat | undefined;
  /** The call goes ahead (or waits for an approval or an earlier call): a later identical one repeats it. */
  made(call: PreparedCall): void;
}

/**
 * Reads the earlier calls of every candidate's scope at once: one read for the run's scope, one per
 * distinct tenant window. Nothing is read when no candidate is guarded (all reads, or all `allow`).
 */
export async function findRepeats(
  context: PlanContext,
  candidates: readonly PreparedCall[],
): Promise<Repeats> {
  const guarded = candidates.filter(
    (c) => c.request.repeatDigest != null && repeatPolicyOf(context.onRepeat, c.tool) !== 'allow',
  );
  const stored = new Map<string, ToolExecutionRecord[]>();
  if (guarded.length > 0) {
    const store = context.ledger.store.ledger;
    const digests = (list: readonly PreparedCall[]): string[] => [
      ...new Set(list.map((c) => c.request.repeatDigest!)),
    ];
    const inRun = guarded.filter((c) => c.tool.repeatWindowMs === undefined);
    const reads: Promise<ToolExecutionRecord[]>[] = [];
    if (inRun.length > 0) {
      reads.push(store.repeatsOf(context.tenantId, digests(inRun), { kind: 'run', runId: context.runId }));
    }
    const windows = new Set(
      guarded.flatMap((c) => (c.tool.repeatWindowMs === undefined ? [] : [c.tool.repeatWindowMs])),
    );
    const now = context.ledger.clock.now();
    for (const windowMs of windows) {
      const inWindow = guarded.filter((c) => c.tool.repeatWindowMs === windowMs);
      reads.push(
        store.repeatsOf(context.tenantId, digests(inWindow), { kind: 'tenant', sinceMs: now - windowMs }),
      );
    }
    for (const record of (await Promise.all(reads)).flat()) {
      const list = stored.get(record.repeatDigest!) ?? [];
      if (!list.some((r) => r.idempotencyKey === record.idempotencyKey)) list.push(record);
      stored.set(record.repeatDigest!, list);
    }
  }
  const madeInStep = new Map<string, string>();
  const guardedKeys = new Set(guarded.map((c) => c.request.idempotencyKey));
  return {
    of(call) {
      const { idempotencyKey: key, repeatDigest: digest } = call.request;
      if (digest == null || !guardedKeys.has(key)) return undefined;
      const policy = repeatPolicyOf(context.onRepeat, call.tool) as 'ask' | 'refuse';
      const earlier = earlierOf((stored.get(digest) ?? []).filter((r) => r.idempotencyKey !== key));
      if (earlier !== undefined) {
        const state = earlierState(earlier);
        if (state !== 'not_taken') return { earlierKey: earlier.idempotencyKey, earlier, state, policy };
      }
      const first = madeInStep.get(digest);
      return first === undefined ? undefined : { earlierKey: first, state: 'unknown', policy };
    },
    made(call) {
      const digest = call.request.repeatDigest;
      if (digest != null && !madeInStep.has(digest)) madeInStep.set(digest, call.request.idempotencyKey);
    },
  };
}
