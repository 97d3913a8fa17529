import { createHash } from 'node:crypto';
import { canonicalJson } from './canonical-json.js';
import type { ToolExecutionRecord } from './record.js';

/*
 * The fourth way a tool runs twice: the model calls it again. A new call whose tool and argument
 * identity equal an earlier call of the same scope that took effect, or may have, is a repeat; the
 * policy (`onRepeat`) says what happens to it. Pure: no I/O, no clock.
 */

/** What happens to a repeat: an operator approves it first, it is not run, or it runs as any call. */
export const REPEAT_POLICIES = ['ask', 'refuse', 'allow'] as const;
export type RepeatPolicy = (typeof REPEAT_POLICIES)[number];

/** The policy of a tool that declares none, under an agent that declares none. */
export const DEFAULT_REPEAT_POLICY: RepeatPolicy = 'ask';

/**
 * Where an earlier call counts: an earlier call of the run itself (every turn of its conversation),
 * of the same conversation id (a guarded call's), or of the tenant within a window (tool-declared).
 */
export type RepeatScope =
  | { readonly kind: 'run'; readonly runId: string }
  | { readonly kind: 'conversation'; readonly conversationId: string }
  | { readonly kind: 'tenant'; readonly sinceMs: number };

/** An earlier call, as a repeat sees it. */
export type EarlierState =
  /** It took effect, or may have (`completed`, `compensated`, or `failed` with a conflict). */
  | 'standing'
  /** Nobody knows yet (`started`, `indeterminate`): the repeat waits for it to be settled. */
  | 'unknown'
  /** It definitely did not take effect: it is not a repeat's reason. */
  | 'not_taken';

/**
 * The identity of a call's effect: its tool and the value of its `repeatKey` (by default, the
 * canonical arguments), as one digest. Two calls with one identity are the same effect made twice.
 *
 * @example
 * repeatDigest('issue_credit', { accountId: 'acct_1', orderId: 'ord_7' });
 */
export function repeatDigest(toolName: string, identity: unknown): string {
  return createHash('sha256').update(toolName).update('\u0000').update(canonicalJson(identity)).digest('hex');
}

/** What an earlier call with the same identity came to, as far as a repeat goes. */
export function earlierState(record: Pick<ToolExecutionRecord, 'status' | 'conflictAt'>): EarlierState {
  switch (record.status) {
    case 'completed':
    case 'compensated':
      return 'standing';
    case 'started':
    case 'indeterminate':
      return 'unknown';
    case 'failed':
      return record.conflictAt === null ? 'not_taken' : 'standing';
  }
}

/**
 * Of several earlier calls with one identity, the one a repeat answers to: an unknown one first (the
 * repeat waits for it), then the newest standing one. Undefined when none took effect or may have.
 */
export function earlierOf<R extends Pick<ToolExecutionRecord, 'status' | 'conflictAt' | 'createdAt'>>(
  records: readonly R[],
): R | undefined {
  const unknown = records.filter((r) => earlierState(r) === 'unknown');
  const standing = records.filter((r) => earlierState(r) === 'standing');
  const newest = (list: R[]): R | undefined =>
    list.reduce<R | undefined>((a, b) => (a === undefined || b.createdAt > a.createdAt ? b : a), undefined);
  return newest(unknown) ?? newest(standing);
}
