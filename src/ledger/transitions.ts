import { OncelyError } from '../errors/index.js';
import type { LedgerStatus } from './statuses.js';

/**
 * Who or what moves a record:
 * - `reserve`: the runtime, before it runs the tool;
 * - `outcome`: the attempt that ran the tool, reporting what happened (also late, after a timeout);
 * - `reconcile`: the tool's reconcile hook, which looked the key up downstream;
 * - `resolve`: an operator's decision;
 * - `compensate`: the completion of the call's compensation record.
 */
export const TRANSITION_VIAS = ['reserve', 'outcome', 'reconcile', 'resolve', 'compensate'] as const;
export type TransitionVia = (typeof TRANSITION_VIAS)[number];

interface TransitionRule {
  readonly from: LedgerStatus | null;
  readonly to: LedgerStatus;
  readonly via: TransitionVia;
}

/**
 * The whole state machine of the ledger. Both stores obey it: they ask this table which moves are
 * allowed and only ever compare-and-set along one of these edges. Anything not listed is refused.
 */
export const TRANSITIONS: readonly TransitionRule[] = [
  { from: null, to: 'started', via: 'reserve' },
  { from: 'failed', to: 'started', via: 'reserve' },

  { from: 'started', to: 'completed', via: 'outcome' },
  { from: 'started', to: 'failed', via: 'outcome' },
  { from: 'started', to: 'indeterminate', via: 'outcome' },
  // The late outcome of the very attempt that was in flight tells the truth, so it may settle a call
  // that nobody else has settled yet.
  { from: 'indeterminate', to: 'completed', via: 'outcome' },
  { from: 'indeterminate', to: 'failed', via: 'outcome' },

  { from: 'started', to: 'completed', via: 'reconcile' },
  { from: 'started', to: 'failed', via: 'reconcile' },
  { from: 'indeterminate', to: 'completed', via: 'reconcile' },
  { from: 'indeterminate', to: 'failed', via: 'reconcile' },

  { from: 'started', to: 'completed', via: 'resolve' },
  { from: 'started', to: 'failed', via: 'resolve' },
  { from: 'indeterminate', to: 'completed', via: 'resolve' },
  { from: 'indeterminate', to: 'failed', via: 'resolve' },

  { from: 'completed', to: 'compensated', via: 'compensate' },
];

export function isAllowedTransition(
  from: LedgerStatus | null,
  to: LedgerStatus,
  via: TransitionVia,
): boolean {
  return TRANSITIONS.some((t) => t.from === from && t.to === to && t.via === via);
}

/** Throws `LEDGER_TRANSITION_REFUSED` unless the table allows the move. Writes nothing. */
export function assertTransition(
  key: string,
  from: LedgerStatus | null,
  to: LedgerStatus,
  via: TransitionVia,
): void {
  if (isAllowedTransition(from, to, via)) return;
  throw new OncelyError(
    'LEDGER_TRANSITION_REFUSED',
    `tool call ${key} cannot move from ${from ?? '(no record)'} to ${to} by ${via}; ` +
      `allowed from ${from ?? '(no record)'}: ${describeAllowed(from)}`,
    { details: { key, from, to, via } },
  );
}

function describeAllowed(from: LedgerStatus | null): string {
  const moves = TRANSITIONS.filter((t) => t.from === from).map((t) => `${t.to} (by ${t.via})`);
  return moves.length === 0 ? 'nothing: the record is final' : moves.join(', ');
}

/** The statuses a `reserve` may take over: a call that definitely did not take effect. */
export const RESERVABLE_STATUSES: readonly LedgerStatus[] = TRANSITIONS.filter(
  (t) => t.via === 'reserve' && t.from !== null,
).map((t) => t.from as LedgerStatus);

/** A transition that ends the unknown: the record then says what happened. */
export function settles(to: LedgerStatus): boolean {
  return to === 'completed' || to === 'failed' || to === 'compensated';
}

/** What an attempt or a reconcile hook observed, against the record as it now stands. */
export interface Observation {
  readonly via: TransitionVia;
  readonly to: LedgerStatus;
  /** The attempt the observation is about (an attempt's own outcome names its attempt). */
  readonly attempt: number;
  /** The downstream honours the idempotency key: two attempts of one key are one effect. */
  readonly keyed: boolean;
}

/**
 * Whether an observation that lost its compare-and-set contradicts the settled record: an effect
 * that landed on a call settled `failed`, an effect of an earlier attempt that landed after the key
 * was re-opened on a downstream that does not honour keys (two effects may now stand), a call
 * found not taken that is recorded as taken, or an attempt that may have landed (it ended unknown)
 * after its call was settled `failed` or re-opened without keys.
 * Such an outcome is a `conflict`, never a quiet `ignored`. Only real observations count (an
 * attempt's outcome, a reconcile hook's answer); a decision that lost a race is just ignored.
 */
export function contradicts(
  observed: Observation,
  current: { readonly status: LedgerStatus; readonly attempt: number },
): boolean {
  if (observed.via !== 'outcome' && observed.via !== 'reconcile') return false;
  if (observed.to === 'completed') {
    if (current.status === 'failed') return true;
    return observed.attempt < current.attempt && !observed.keyed;
  }
  if (observed.to === 'failed') {
    return (
      observed.attempt === current.attempt &&
      (current.status === 'completed' || current.status === 'compensated')
    );
  }
  if (observed.to === 'indeterminate' && observed.via === 'outcome') {
    // An attempt that ended not knowing, after others settled or re-opened its call: it outlived the
    // deadline they waited for (its process was frozen or cut off), so it may have landed after
    // all — on a call settled failed, or beside a later attempt on a downstream without keys.
    if (current.status === 'failed') return true;
    return observed.attempt < current.attempt && !observed.keyed;
  }
  return false;
}
