import type { Line } from './stage.js';

/*
 * The result screen's "what stopped you": the record, status or event of Penny's real ledger (and
 * the approvals her run asked for) that refused the second effect, quoted as the screens show them.
 * It is read from the play's ledger afterwards; nothing here knows which trick was played.
 */

/** One ledger record of Penny's, and its history. */
export interface CallStory {
  readonly key: string;
  readonly tool: string;
  readonly args: unknown;
  readonly status: string;
  readonly attempt: number;
  readonly history: readonly string[];
  /** Who made each transition of `history` (`runtime`, `reconcile`, `operator`), in the same order. */
  readonly actors: readonly string[];
}

/** An approval Penny's run asked for, and how it was decided. */
export interface ApprovalStory {
  readonly key: string;
  readonly tool: string;
  readonly args: unknown;
  /** The earlier call this one repeats (an approval asked for a repeat); null for a tool's own approval. */
  readonly repeatOf: string | null;
  readonly status: string;
  readonly decidedBy: string | null;
  readonly reason: string | null;
}

export interface StoppedBy {
  /** The rule of oncely that held, in a sentence. */
  readonly rule: string;
  /** The lines of the ledger that show it, verbatim. */
  readonly quote: readonly string[];
}

const args = (value: unknown): string => JSON.stringify(value);

/** A record as the screens show it: key, tool, arguments, status, attempt. */
export function recordLine(call: CallStory): string {
  return `${call.key} ${call.tool} ${args(call.args)} \u2192 ${call.status} (attempt ${call.attempt})`;
}

function approvalLine(a: ApprovalStory): string {
  const by = a.decidedBy === null ? '' : ` by ${a.decidedBy}`;
  return `approval ${a.key} ${a.tool} ${args(a.args)} \u2192 ${a.status}${by}`;
}

const UNKNOWN = /^(started|indeterminate) /;

/** The event lines of `call` made by `actor`, each after the record's line. */
function events(call: CallStory, pick: (text: string, actor: string) => boolean): string[] {
  return call.history.filter((text, i) => pick(text, call.actors[i] ?? '')).map((text) => `  ${text}`);
}

/** What a play of Penny's left: her ledger, her run's approvals, what her model heard, the story. */
interface Evidence {
  readonly ledger: readonly CallStory[];
  readonly approvals: readonly ApprovalStory[];
  readonly heard: readonly string[];
  readonly lines: readonly Line[];
}

/** The line of Penny's ledger that refused the second effect (null when her ledger is empty). */
export function stoppedBy(play: Evidence): StoppedBy | null {
  const refunds = play.ledger.filter((c) => c.tool === 'refund_order');
  const completed = refunds.find((c) => c.status === 'completed');
  const repeat = play.approvals.find((a) => a.repeatOf !== null && a.status === 'rejected');
  if (repeat !== undefined) {
    const earlier = refunds.find((c) => c.key === repeat.repeatOf);
    return {
      rule:
        'The repeat check: a new refund of an order already paid was not sent. It waited for a ' +
        'supervisor, who saw the earlier call and refused it.',
      quote: [
        approvalLine(repeat),
        `  repeat_of ${repeat.repeatOf ?? ''}`,
        ...(repeat.reason === null ? [] : [`  reason: ${repeat.reason}`]),
        ...(earlier === undefined ? [] : [recordLine(earlier)]),
      ],
    };
  }
  const rejected = play.approvals.find((a) => a.status === 'rejected');
  if (rejected !== undefined) {
    const approved = play.approvals.filter((a) => a.status === 'approved');
    return {
      rule:
        'An approval is bound to the exact arguments of one call and used once: the call asked for ' +
        'was refused, and only the call that was approved went out.',
      quote: [
        approvalLine(rejected),
        ...approved.map(approvalLine),
        ...(completed ? [recordLine(completed)] : []),
      ],
    };
  }
  const byOperator = refunds.find((c) => c.actors.includes('operator'));
  if (byOperator !== undefined) {
    return {
      rule:
        'An unknown call is never run again by itself: it waited, "unknown", until an operator settled ' +
        'it, once (compare-and-set; a second settlement is refused), and only then was a new refund made.',
      quote: [
        recordLine(byOperator),
        ...events(byOperator, (t, actor) => UNKNOWN.test(t) || actor === 'operator'),
        ...(completed !== undefined && completed !== byOperator ? [recordLine(completed)] : []),
      ],
    };
  }
  const reconciled = refunds.find(
    (c) =>
      c.status === 'completed' && c.actors.includes('reconcile') && c.history.some((t) => UNKNOWN.test(t)),
  );
  if (reconciled !== undefined) {
    return {
      rule:
        'Unknown is not failed: the call was never sent again. Its record stayed unknown until the ' +
        'reconcile hook found the payment under its key, and recorded it.',
      quote: [
        recordLine(reconciled),
        ...events(reconciled, (t, actor) => UNKNOWN.test(t) || actor === 'reconcile'),
      ],
    };
  }
  const stoodDown = play.lines.find((l) => l.who === 'game' && /stood down/.test(l.text));
  if (stoodDown !== undefined && completed !== undefined) {
    return {
      rule:
        'One lease at a time: the Penny who woke up held an old lease epoch, so what she tried next ' +
        'was refused; the one record of the refund was made by the new owner.',
      quote: [stoodDown.text, recordLine(completed), ...events(completed, (t) => /^started /.test(t))],
    };
  }
  if (completed === undefined) return null;
  const heard = play.heard.filter((h) => h.startsWith(`${completed.tool}: completed`));
  return {
    rule:
      'One record per call, read back: the ledger holds the refund and its receipt, and her model ' +
      'heard it; asked again, Penny answered from it and made no second call.',
    quote: [recordLine(completed), ...events(completed, () => true), ...heard.map((h) => `heard: ${h}`)],
  };
}
