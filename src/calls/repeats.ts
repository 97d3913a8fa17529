import {
  earlierOf,
  earlierState,
  type RepeatPolicy,
  type RepeatScope,
  type ToolExecutionRecord,
} from '../ledger/index.js';
import type { LedgerStore, ReserveRequest } from '../store/index.js';
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

/** A call planned as no repeat under a tenant-wide window: checked again as it is reserved. */
export interface WindowedCall {
  readonly request: ReserveRequest;
  readonly windowMs: number;
  /**
   * The call has a record: it is checked only as it is re-opened (a reservation with
   * `reopenVersion`), never as its existing record is read back.
   */
  readonly recorded?: boolean;
}

/**
 * The call as a windowed call when its repeats are looked for across the tenant (`repeatWindowMs`)
 * under a policy that guards them; undefined otherwise.
 */
export function windowedCall(
  call: PreparedCall,
  policy: RepeatPolicy,
  recorded = false,
): WindowedCall | undefined {
  const windowMs = call.tool.repeatWindowMs;
  if (windowMs === undefined || call.request.repeatDigest == null || policy === 'allow') return undefined;
  return { request: call.request, windowMs, ...(recorded ? { recorded } : {}) };
}

/** The earlier identical calls another process reserved between a windowed call's plan and its reservation. */
export class RepeatRaced extends Error {
  constructor(readonly earlier: readonly ToolExecutionRecord[]) {
    super(
      `a tenant-wide repeat check was overtaken: ${earlier.map((r) => r.idempotencyKey).join(', ')} ` +
        'was reserved meanwhile; the call is planned again',
    );
  }
}

/**
 * Inside the reservation's transaction, under `guardRepeats`: the tenant-wide repeat check of the
 * windowed calls again. Two runs that plan the same effect at once both find no earlier call; the
 * lock orders their reservations, and the second finds the first here. Throws `RepeatRaced` with
 * the earlier calls it finds (their transaction then reserves nothing); `batch` are the keys being
 * reserved together, never an earlier call of each other here.
 */
export async function recheckWindowed(
  ledger: Pick<LedgerStore, 'guardRepeats' | 'repeatsOf'>,
  nowMs: number,
  windowed: readonly WindowedCall[],
  batch: ReadonlySet<string>,
): Promise<void> {
  const tenantId = windowed[0]?.request.tenantId;
  if (tenantId === undefined) return;
  await ledger.guardRepeats(
    tenantId,
    windowed.map((w) => w.request.repeatDigest!),
  );
  const raced: ToolExecutionRecord[] = [];
  for (const windowMs of new Set(windowed.map((w) => w.windowMs))) {
    const digests = windowed.filter((w) => w.windowMs === windowMs).map((w) => w.request.repeatDigest!);
    const found = await ledger.repeatsOf(tenantId, digests, { kind: 'tenant', sinceMs: nowMs - windowMs });
    raced.push(...found.filter((r) => !batch.has(r.idempotencyKey) && earlierState(r) !== 'not_taken'));
  }
  if (raced.length > 0) throw new RepeatRaced(raced);
}
