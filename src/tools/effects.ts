import { OncelyError } from '../errors/index.js';
import type { EffectKind } from '../ledger/index.js';

/** How a tool touches the world, and so how often it may be tried (DESIGN §3). */
export interface Effect {
  readonly kind: EffectKind;
  /** Tries per reservation: up to 3 for a read, exactly 1 for anything that changes something. */
  readonly attempts: number;
  /** The run waits for an operator's approval of these exact arguments before the call is reserved. */
  readonly approval: boolean;
  /** Backoff between tries of a read: full jitter on `baseDelayMs * 2^n`, capped at `maxDelayMs`. */
  readonly backoff: { readonly baseDelayMs: number; readonly maxDelayMs: number };
}

export const MAX_READ_ATTEMPTS = 3;
const DEFAULT_BACKOFF = { baseDelayMs: 100, maxDelayMs: 2_000 } as const;

export interface ReadOptions {
  /** 1 to 3; default 3. */
  readonly attempts?: number;
  readonly baseDelayMs?: number;
  readonly maxDelayMs?: number;
}

export interface WriteOptions {
  /** Only 1 is allowed: a second try of a write may apply it twice. */
  readonly attempts?: number;
}

export interface ApprovalOptions extends WriteOptions {
  readonly approval?: boolean;
}

/**
 * A tool that only looks: retried up to 3 times on a timeout or error, with backoff and jitter.
 *
 * @example
 * defineTool({ name: 'lookup_order', effect: read(), ... })
 */
export function read(options: ReadOptions = {}): Effect {
  const attempts = options.attempts ?? MAX_READ_ATTEMPTS;
  if (!Number.isInteger(attempts) || attempts < 1 || attempts > MAX_READ_ATTEMPTS) {
    throw definitionError(`read() allows 1 to ${MAX_READ_ATTEMPTS} attempts; got ${String(attempts)}`);
  }
  const baseDelayMs = delay('baseDelayMs', options.baseDelayMs ?? DEFAULT_BACKOFF.baseDelayMs);
  const maxDelayMs = delay('maxDelayMs', options.maxDelayMs ?? DEFAULT_BACKOFF.maxDelayMs);
  return freeze({ kind: 'read', attempts, approval: false, backoff: { baseDelayMs, maxDelayMs } });
}

/** A tool that changes a record you own (an account's owner): one attempt; a timeout is unknown. */
export function write(options: WriteOptions = {}): Effect {
  return sideEffect('write', options, false);
}

/** A tool that acts on the outside world (an email, a credit): one attempt, optionally approved first. */
export function external(options: ApprovalOptions = {}): Effect {
  return sideEffect('external', options, options.approval ?? false);
}

/** A tool that deletes or destroys: one attempt, optionally approved first. */
export function destructive(options: ApprovalOptions = {}): Effect {
  return sideEffect('destructive', options, options.approval ?? false);
}

function sideEffect(kind: Exclude<EffectKind, 'read'>, options: WriteOptions, approval: unknown): Effect {
  const attempts = options.attempts ?? 1;
  if (attempts !== 1) {
    throw definitionError(
      `${kind}() tools get exactly one attempt, because a second try can apply the effect twice; ` +
        `remove attempts: ${String(attempts)} (declare the tool read() only if it changes nothing)`,
    );
  }
  if (typeof approval !== 'boolean') throw definitionError(`${kind}({ approval }) must be true or false`);
  return freeze({ kind, attempts: 1, approval, backoff: { baseDelayMs: 0, maxDelayMs: 0 } });
}

function delay(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 0 || value > 60_000) {
    throw definitionError(
      `read({ ${name} }) must be an integer from 0 to 60000 milliseconds; got ${String(value)}`,
    );
  }
  return value;
}

function freeze(effect: Effect): Effect {
  return Object.freeze({ ...effect, backoff: Object.freeze({ ...effect.backoff }) });
}

/** Whether a value is a well-formed effect, whoever built it. */
export function effectProblem(effect: unknown): string | undefined {
  if (typeof effect !== 'object' || effect === null)
    return 'use read(), write(), external() or destructive()';
  const e = effect as Partial<Effect>;
  if (e.kind !== 'read' && e.kind !== 'write' && e.kind !== 'external' && e.kind !== 'destructive') {
    return 'use read(), write(), external() or destructive()';
  }
  if (e.kind !== 'read' && e.attempts !== 1) {
    return `${e.kind} tools get exactly one attempt; a second try can apply the effect twice`;
  }
  if (
    e.kind === 'read' &&
    (!Number.isInteger(e.attempts) || (e.attempts ?? 0) < 1 || (e.attempts ?? 0) > MAX_READ_ATTEMPTS)
  ) {
    return `read tools get 1 to ${MAX_READ_ATTEMPTS} attempts`;
  }
  if (e.kind === 'read' && e.approval === true) return 'a read needs no approval; remove approval';
  return undefined;
}

export function definitionError(message: string): OncelyError {
  return new OncelyError('TOOL_DEFINITION_INVALID', message);
}

/** Full jitter: a random delay in [0, min(max, base * 2^retry)), `random` drawing in [0, 1). */
export function backoffDelay(effect: Effect, retry: number, random: () => number): number {
  const ceiling = Math.min(effect.backoff.maxDelayMs, effect.backoff.baseDelayMs * 2 ** retry);
  return Math.floor(random() * ceiling);
}

/**
 * The longest one reservation's tries can take: every try's timeout, and the longest backoff between
 * them. Kept on the ledger record, so any process can tell when an attempt can no longer land.
 */
export function attemptBudgetMs(effect: Effect, timeoutMs: number): number {
  const tries = effect.kind === 'read' ? effect.attempts : 1;
  return tries * timeoutMs + (tries - 1) * effect.backoff.maxDelayMs;
}
