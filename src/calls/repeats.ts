import {
  earlierOf,
  earlierState,
  type RepeatPolicy,
  type RepeatScope,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import type { Ledger } from './ledger.js';
import type { PreparedCall } from './prepare.js';

/*
 * Catching the model's repeats (DESIGN §6, the fourth way a tool runs twice): before a new call that
 * changes something is reserved, an earlier call of its scope with the same tool and identity (the
 * repeat digest) that took effect or may have makes it a repeat; the decision table then says what
 * happens to it. A run's scope is the run (every turn of its conversation); a guarded call's, its
 * conversation id or else its run id; a tool's `repeatWindowMs` widens either to the tenant within
 * that window. A call of the same batch made first counts as an earlier call too.
 */

/** An earlier call a new call repeats. */
export interface FoundRepeat {
  readonly earlierKey: string;
  /** Its record; undefined for a call of this batch not made yet (it is waited for). */
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

export interface RepeatLookup {
  readonly ledger: Ledger;
  readonly tenantId: string;
  /** The call's own scope (its run, or its conversation), used unless its tool has a window. */
  readonly scopeOf: (call: PreparedCall) => RepeatScope;
  /** The call's policy (a read's is always `allow`). */
  readonly policyOf: (call: PreparedCall) => RepeatPolicy;
}

/**
 * Reads the earlier calls of every candidate's scope at once: one read per distinct scope. Nothing
 * is read when no candidate is guarded (all reads, or all `allow`).
 */
export async function findRepeats(
  lookup: RepeatLookup,
  candidates: readonly PreparedCall[],
): Promise<Repeats> {
  const guarded = candidates.filter((c) => c.request.repeatDigest != null && lookup.policyOf(c) !== 'allow');
  const stored = await readEarlier(lookup, guarded);
  const madeInBatch = new Map<string, string>();
  const guardedKeys = new Set(guarded.map((c) => c.request.idempotencyKey));
  return {
    of(call) {
      const { idempotencyKey: key, repeatDigest: digest } = call.request;
      if (digest == null || !guardedKeys.has(key)) return undefined;
      const policy = lookup.policyOf(call) as 'ask' | 'refuse';
      const earlier = earlierOf((stored.get(digest) ?? []).filter((r) => r.idempotencyKey !== key));
      if (earlier !== undefined) {
        const state = earlierState(earlier);
        if (state !== 'not_taken') return { earlierKey: earlier.idempotencyKey, earlier, state, policy };
      }
      const first = madeInBatch.get(digest);
      return first === undefined ? undefined : { earlierKey: first, state: 'unknown', policy };
    },
    made(call) {
      const digest = call.request.repeatDigest;
      if (digest != null && !madeInBatch.has(digest)) madeInBatch.set(digest, call.request.idempotencyKey);
    },
  };
}

/** The earlier calls of the guarded calls' scopes, by repeat digest. */
async function readEarlier(
  lookup: RepeatLookup,
  guarded: readonly PreparedCall[],
): Promise<Map<string, ToolExecutionRecord[]>> {
  const byScope = new Map<string, { scope: RepeatScope; digests: Set<string> }>();
  const now = lookup.ledger.clock.now();
  for (const call of guarded) {
    const windowMs = call.tool.repeatWindowMs;
    const scope: RepeatScope =
      windowMs === undefined ? lookup.scopeOf(call) : { kind: 'tenant', sinceMs: now - windowMs };
    const id = JSON.stringify(scope);
    const entry = byScope.get(id) ?? { scope, digests: new Set<string>() };
    entry.digests.add(call.request.repeatDigest!);
    byScope.set(id, entry);
  }
  const reads = [...byScope.values()].map(({ scope, digests }) =>
    lookup.ledger.store.ledger.repeatsOf(lookup.tenantId, [...digests], scope),
  );
  const stored = new Map<string, ToolExecutionRecord[]>();
  for (const record of (await Promise.all(reads)).flat()) {
    const list = stored.get(record.repeatDigest!) ?? [];
    if (!list.some((r) => r.idempotencyKey === record.idempotencyKey)) list.push(record);
    stored.set(record.repeatDigest!, list);
  }
  return stored;
}
