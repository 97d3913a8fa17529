import type { Books, DownstreamKind, Effect } from './downstream.js';

/*
 * The drill's verdict, from two sources that never wrote to each other: the ledger as the store holds
 * it (read with SQL, not through oncely's code) and each downstream service's own books. Pure
 * functions over what was read, so each rule is tested on its own (checks.test.ts).
 */

export interface RunRow {
  readonly runId: string;
  readonly agent: string;
  readonly status: string;
  readonly reason: string | null;
}

export interface RecordRow {
  readonly key: string;
  readonly runId: string;
  readonly toolCallId: string;
  readonly toolName: string;
  readonly status: string;
  readonly attempt: number;
  readonly resultReference: string | null;
  readonly settledBy: string | null;
  readonly conflict: boolean;
}

export interface HistoryRow {
  readonly key: string;
  /** Milliseconds since the epoch. */
  readonly at: number;
  readonly actorKind: string;
  readonly actorId: string;
  readonly via: string;
  readonly from: string | null;
  readonly to: string | null;
  readonly attempt: number;
}

export interface RunEventRow {
  readonly runId: string;
  readonly seq: number;
  readonly at: number;
  readonly type: string;
  readonly data: Record<string, unknown>;
}

export interface Ledger {
  readonly runs: readonly RunRow[];
  readonly records: readonly RecordRow[];
  readonly history: readonly HistoryRow[];
  readonly events: readonly RunEventRow[];
}

export interface Violation {
  readonly rule: string;
  readonly message: string;
  readonly runId?: string;
  readonly key?: string;
}

/** Which downstream a tool's effects are in, and how an effect names its call. */
export const TOOL_SERVICES: Readonly<
  Record<string, { kind: DownstreamKind; by: 'key' | 'reference' } | undefined>
> = {
  credit: { kind: 'keyed', by: 'key' },
  refund: { kind: 'keyed', by: 'key' },
  charge: { kind: 'unkeyed', by: 'reference' },
  notify: { kind: 'late', by: 'key' },
  ping: { kind: 'never', by: 'key' },
};

export interface Verdict {
  readonly violations: readonly Violation[];
  readonly effects: number;
  /** Second effects of one call on the unkeyed service that the docs admit (shown as a conflict). */
  readonly admittedDuplicates: number;
}

const callOf = (e: Effect): string => e.key ?? e.reference ?? '';

export function judge(ledger: Ledger, books: readonly Books[]): Verdict {
  const violations: Violation[] = [];
  const records = new Map(ledger.records.map((r) => [r.key, r]));
  let effects = 0;
  let admittedDuplicates = 0;

  // The downstreams' books against the ledger.
  for (const book of books) {
    const byCall = new Map<string, Effect[]>();
    for (const effect of book.effects) {
      effects += 1;
      const call = callOf(effect);
      byCall.set(call, [...(byCall.get(call) ?? []), effect]);
    }
    for (const [call, found] of byCall) {
      const record = records.get(call);
      if (record === undefined) {
        violations.push({
          rule: 'effect-without-record',
          key: call,
          message: `the ${book.kind} service applied ${found.length} effect(s) under ${call}, and the ledger has no record of it`,
        });
        continue;
      }
      if (book.kind === 'never') {
        violations.push({
          rule: 'effect-on-never',
          key: call,
          runId: record.runId,
          message: `the never-applying service has an effect under ${call}`,
        });
      }
      if (found.length > 1) {
        const attempts = new Set(found.map((e) => e.attempt));
        if (book.kind === 'unkeyed' && record.conflict && attempts.size === found.length) {
          admittedDuplicates += found.length - 1;
        } else {
          violations.push({
            rule: 'duplicate-effect',
            key: call,
            runId: record.runId,
            message: `${found.length} effects on the ${book.kind} service under ${call} (attempts ${found.map((e) => e.attempt).join(', ')})${record.conflict ? '' : ', and its record shows no conflict'}`,
          });
        }
      }
      if (record.status !== 'completed' && record.status !== 'compensated' && !record.conflict) {
        violations.push({
          rule: 'effect-not-completed',
          key: call,
          runId: record.runId,
          message: `the ${book.kind} service applied ${call}, but its record is ${record.status}`,
        });
      }
      if (
        record.status === 'completed' &&
        record.resultReference !== null &&
        !found.some((e) => e.id === record.resultReference)
      ) {
        violations.push({
          rule: 'reference-mismatch',
          key: call,
          runId: record.runId,
          message: `${call} is completed with reference ${record.resultReference}, which is none of its effects (${found.map((e) => e.id).join(', ')})`,
        });
      }
    }
  }

  // Every completed record of a tool with an effect names an effect in its service's books.
  const effectCalls = new Map<DownstreamKind, Set<string>>();
  for (const book of books) effectCalls.set(book.kind, new Set(book.effects.map(callOf)));
  for (const record of ledger.records) {
    const service = TOOL_SERVICES[record.toolName];
    if (service === undefined || record.status !== 'completed') continue;
    if (!(effectCalls.get(service.kind)?.has(record.key) ?? false)) {
      violations.push({
        rule: 'completed-without-effect',
        key: record.key,
        runId: record.runId,
        message: `${record.key} (${record.toolName}) is completed, and the ${service.kind} service has no effect under it`,
      });
    }
  }

  violations.push(...historyViolations(ledger));
  violations.push(...runViolations(ledger));
  return { violations, effects, admittedDuplicates };
}

/**
 * The history is consistent: every attempt was started by the process that held the run's lease at
 * that moment (never by a driver after it lost it); every outcome names an attempt that was started,
 * and is reported by the process that started it (a late outcome under its own attempt); no step was
 * asked of the model twice once saved, and every record's call is one the model asked for.
 */
export function historyViolations(ledger: Ledger): Violation[] {
  const violations: Violation[] = [];
  const claims = new Map<string, { at: number; owner: string; epoch: number }[]>();
  const responses = new Map<string, Map<number, string[]>>();
  for (const event of ledger.events) {
    if (event.type === 'run.claimed') {
      const list = claims.get(event.runId) ?? [];
      list.push({ at: event.at, owner: String(event.data.owner), epoch: Number(event.data.epoch) });
      claims.set(event.runId, list);
    } else if (event.type === 'model.response') {
      const step = Number(event.data.step);
      const calls = ((event.data.calls as { toolCallId?: string }[] | undefined) ?? []).map((c) =>
        String(c.toolCallId),
      );
      const byStep = responses.get(event.runId) ?? new Map<number, string[]>();
      if (byStep.has(step)) {
        violations.push({
          rule: 'step-asked-again',
          runId: event.runId,
          message: `run ${event.runId}: step ${step} has two saved model responses`,
        });
      }
      byStep.set(step, calls);
      responses.set(event.runId, byStep);
    }
  }
  const records = new Map(ledger.records.map((r) => [r.key, r]));
  for (const record of ledger.records) {
    const asked = [...(responses.get(record.runId)?.values() ?? [])].some((calls) =>
      calls.includes(record.toolCallId),
    );
    if (!asked) {
      violations.push({
        rule: 'call-not-asked',
        key: record.key,
        runId: record.runId,
        message: `${record.key}: no saved model response of run ${record.runId} holds call ${record.toolCallId}`,
      });
    }
  }
  const starters = new Map<string, Map<number, string>>();
  const sorted = [...ledger.history].sort((a, b) => a.at - b.at);
  for (const event of sorted) {
    const record = records.get(event.key);
    if (record === undefined) continue;
    const startsAttempt = event.via === 'reserve' && event.to === 'started';
    if (startsAttempt && event.actorKind === 'runtime') {
      const holder = holderAt(claims.get(record.runId) ?? [], event.at);
      if (holder !== undefined && !holder.includes(event.actorId)) {
        violations.push({
          rule: 'attempt-without-lease',
          key: event.key,
          runId: record.runId,
          message: `${event.key}: attempt ${event.attempt} was started by ${event.actorId} at ${new Date(event.at).toISOString()}, when the run's lease was ${holder.join(' or ')}'s`,
        });
      }
    }
    if (startsAttempt) {
      const byAttempt = starters.get(event.key) ?? new Map<number, string>();
      byAttempt.set(event.attempt, event.actorId);
      starters.set(event.key, byAttempt);
    } else if (event.via === 'outcome' && event.actorKind === 'runtime') {
      const starter = starters.get(event.key)?.get(event.attempt);
      if (starter === undefined) {
        violations.push({
          rule: 'outcome-of-no-attempt',
          key: event.key,
          runId: record.runId,
          message: `${event.key}: an outcome for attempt ${event.attempt}, which was never started`,
        });
      } else if (starter !== event.actorId) {
        violations.push({
          rule: 'outcome-of-another-attempt',
          key: event.key,
          runId: record.runId,
          message: `${event.key}: ${event.actorId} reported the outcome of attempt ${event.attempt}, which ${starter} started`,
        });
      }
    }
  }
  return violations;
}

/**
 * Who held the run's lease at `at`: the owner of the newest claim made by then. Claims within the
 * same millisecond as `at` are each possible (their order against the event is not known).
 */
function holderAt(
  claims: readonly { at: number; owner: string; epoch: number }[],
  at: number,
): string[] | undefined {
  const before = claims.filter((c) => c.at < at);
  const same = claims.filter((c) => c.at === at).map((c) => c.owner);
  const newest = before.reduce<{ at: number; epoch: number; owner: string } | undefined>(
    (best, c) => (best === undefined || c.epoch > best.epoch ? c : best),
    undefined,
  );
  const holders = [...(newest === undefined ? [] : [newest.owner]), ...same];
  return holders.length === 0 ? undefined : holders;
}

/** No run in limbo: each completed, or waiting for its unknown calls, or failed with a reason. */
export function runViolations(ledger: Ledger): Violation[] {
  const violations: Violation[] = [];
  const unknownByRun = new Map<string, string[]>();
  for (const r of ledger.records) {
    if (r.status === 'started' || r.status === 'indeterminate') {
      unknownByRun.set(r.runId, [...(unknownByRun.get(r.runId) ?? []), r.key]);
    }
  }
  for (const run of ledger.runs) {
    if (run.status === 'completed') continue;
    if (run.status === 'awaiting_reconciliation' && (unknownByRun.get(run.runId)?.length ?? 0) > 0) continue;
    if (run.status === 'failed' && run.reason !== null && run.reason !== '') continue;
    violations.push({
      rule: 'run-in-limbo',
      runId: run.runId,
      message: `run ${run.runId} ended the drill ${run.status}${run.reason === null ? '' : ` (${run.reason})`}${run.status === 'awaiting_reconciliation' ? ', naming no unknown call' : ''}`,
    });
  }
  return violations;
}
