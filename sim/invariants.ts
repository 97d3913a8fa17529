import type { JsonValue, LedgerEvent, ToolExecutionRecord } from '../src/ledger/index.js';
import type { Store } from '../src/store/index.js';
import { guardedPolicies } from './guarded.js';
import type { SchedulePlan } from './plan.js';
import type { SlotTaken } from './schedule.js';
import { CREDIT_CONCURRENCY, FOLLOW_UP, runIdOf, TENANT, WORKFLOW_RUN_ID, type Books } from './world.js';

/*
 * What must hold after every schedule, checked against the services' own books (what took effect),
 * never the ledger's word alone:
 * - a keyed service applied each key at most once (even after a reconcile hook lied);
 * - every second effect of one key on the service that cannot take a key is a recorded conflict;
 * - no record says `completed` for a call that never took effect, and none says `failed` (without a
 *   conflict) for one whose effect stands;
 * - no conflict but after a forced settlement, or past an attempt whose process froze or was cut off:
 *   every other attempt here ends before its timeout plus the margin, so a settlement made without
 *   force was never made while the attempt could still land;
 * - no effect without a record;
 * - no run in limbo (queued or running once the world is quiet), no completed run with an unknown call,
 *   no run waiting on reconciliation without an unknown call (its own, or one a repeat of it waits for);
 * - the model never left believing "did not take effect" about an effect that stands;
 * - a tool's concurrency limit never exceeded, and every slot a living process took was let go;
 * - a compensation ran at most once per call;
 * - a call that needs an approval is sent only once an operator approved it (a rejected one never);
 * - a message the user sends again (same client message id) is one turn, never two;
 * - every attempt was sent under the run's current lease: none after another process claimed the run;
 * - a call whose success answer reached a process that lived on (never killed, never cut off from the
 *   store) is not left unknown: the outcome in hand is recorded;
 * - no repeat of a standing effect without an operator's approval or an `allow` policy: of two calls
 *   of one run with one tool and identity that both took effect, the later had an approval that
 *   names the earlier (`repeat_of`) and was approved, and was reserved only once the earlier was known
 *   to have taken effect (never while it was unknown) — unless the earlier was forced or lied `failed`
 *   or outlived its deadline (the ledger then honestly believed it had not taken effect); and no
 *   guarded repeat is even sent unapproved once the call it repeats is known to have taken effect;
 * - a workflow retry never repeats a standing effect (a node's next attempt after a credit of an
 *   earlier one took effect starts only on an operator's `retry`), and no workflow run is left running;
 * - every history is append-only and in order: ids and times rising, each transition from where the
 *   last one left the record.
 * A record that took a lying hook's word is excused only where its history says it was the hook's
 * (a `reconcile` transition). A call an operator forced `failed` is the operator's word against an attempt that may still land:
 * its second effect, or its effect under a `failed`, is excused; and when that attempt's process died
 * before the landing (nobody saw it land: no conflict), or the run's model was not asked since the
 * conflict was recorded (the run ended, or waits: told at its next call), so is the model's belief. A
 * conflict recorded before a model call must reach the model in that call.
 */

export interface Facts {
  readonly store: Store;
  readonly plan: SchedulePlan;
  readonly books: Books;
  /** The schedule stopped at its horizon (or step bound), not because the world was quiet. */
  readonly atHorizon: boolean;
  /** Whether a process lived on from a virtual time to the end: never killed, never cut off. */
  readonly livedOn: (process: string, fromMs: number) => boolean;
  /** Whether a process was frozen or cut off from the store at some time after `fromMs`. */
  readonly stalledAfter: (process: string, fromMs: number) => boolean;
  readonly slotsTaken: readonly SlotTaken[];
  /** The virtual clock's start (attempts' times are absolute). */
  readonly startMs: number;
}

const UNKNOWN = new Set(['started', 'indeterminate']);

export async function checkInvariants(facts: Facts): Promise<string[]> {
  const { store, books } = facts;
  const v: string[] = [];
  const records = await store.ledger.list(TENANT, { limit: 10_000 });
  const byKey = new Map(records.map((r) => [r.idempotencyKey, r]));
  const histories = new Map<string, LedgerEvent[]>();
  for (const r of records)
    histories.set(r.idempotencyKey, await store.ledger.history(TENANT, r.idempotencyKey));
  const forced = (key: string): boolean =>
    (histories.get(key) ?? []).some((e) => isObject(e.detail) && e.detail.forced === true);
  // A record that took a lying hook's word: excused only if the ledger says it was the hook's word.
  const lied = (key: string, status: string): boolean =>
    books.lies.get(key) === status &&
    (histories.get(key) ?? []).some(
      (e) => e.kind === 'transition' && e.to === status && e.actor.kind === 'reconcile',
    );
  const outlived = (key: string): boolean =>
    books.attempts.some((a) => a.key === key && facts.stalledAfter(a.process, a.atMs));

  for (const [key, n] of books.applied) {
    const record = byKey.get(key);
    if (record === undefined) {
      v.push(`effect without a record: ${key} took effect ${n} time(s), the ledger has no record of it`);
      continue;
    }
    if (record.toolName !== 'send_email' && n > 1) v.push(`keyed downstream applied ${key} ${n} times`);
    if (record.toolName === 'send_email' && n > 1 && record.conflictAt === null && !forced(key)) {
      v.push(`${key} took effect ${n} times on a downstream without keys, and no conflict is recorded`);
    }
  }
  for (const r of records) {
    if (r.compensationOf !== null || r.effect === 'read') continue;
    const n = books.count(r.idempotencyKey);
    if (
      (r.status === 'completed' || r.status === 'compensated') &&
      n === 0 &&
      !lied(r.idempotencyKey, 'completed')
    ) {
      v.push(`${r.idempotencyKey} is ${r.status} but never took effect (${r.toolName})`);
    }
    if (
      r.status === 'failed' &&
      n > 0 &&
      r.conflictAt === null &&
      !forced(r.idempotencyKey) &&
      !lied(r.idempotencyKey, 'failed')
    ) {
      v.push(`${r.idempotencyKey} is failed, with no conflict, but its effect stands (${r.toolName})`);
    }
    if (
      r.conflictAt !== null &&
      !forced(r.idempotencyKey) &&
      !outlived(r.idempotencyKey) &&
      !books.lies.has(r.idempotencyKey)
    ) {
      // In this world every attempt lands before its timeout plus the margin, so only a settlement
      // forced past an attempt that may still land can be contradicted by that attempt — or one made
      // past an attempt whose process froze or was cut off (it outlived its deadline). A lying
      // hook's word contradicted later (by the truth, or the attempt) is the ledger being honest.
      v.push(
        `${r.idempotencyKey} was settled while its attempt could still land, without force, and the attempt contradicted it (a conflict)`,
      );
    }
    if (
      r.status === 'compensated' &&
      !books.undone.has(r.idempotencyKey) &&
      !lied(r.idempotencyKey, 'completed')
    ) {
      v.push(`${r.idempotencyKey} is compensated but its compensation never ran`);
    }
  }
  for (const [tool, max] of books.maxInFlight) {
    if (tool === 'issue_credit' && max > CREDIT_CONCURRENCY) {
      v.push(`${tool} ran ${max} calls at once; its concurrency is ${CREDIT_CONCURRENCY}`);
    }
  }
  for (const [key, n] of books.undone) {
    if (n > 1) v.push(`${key} was compensated ${n} times: the undo ran more than once`);
  }
  if (!facts.atHorizon) {
    for (const s of facts.slotsTaken) {
      if (s.released !== true && facts.livedOn(s.process, facts.startMs + s.atMs)) {
        v.push(
          `slot ${s.slot} of ${s.tool}, taken by ${s.process} at ${s.atMs} ms, was never let go though ${s.process} lived on`,
        );
      }
    }
    for (const a of books.attempts) {
      if (a.answeredOkAtMs === undefined || !facts.livedOn(a.process, a.answeredOkAtMs)) continue;
      const record = byKey.get(a.key);
      if (record !== undefined && UNKNOWN.has(record.status)) {
        v.push(
          `${a.key}: ${a.process} was told it took effect at ${a.answeredOkAtMs - facts.startMs} ms and lived on, but the record is still ${record.status}`,
        );
      }
    }
  }
  v.push(...(await leaseProblems(facts)));
  v.push(...(await approvalProblems(facts)));
  v.push(...(await countProblems(facts, records)));
  // When a call was first known to have taken effect: its first completion, or the conflict that
  // said its effect landed under a `failed`.
  const tookEffectAt = (key: string): string | undefined =>
    (histories.get(key) ?? []).find(
      (e) => e.to === 'completed' && (e.kind === 'transition' || e.kind === 'conflict'),
    )?.at;
  const excused = (key: string): boolean => forced(key) || lied(key, 'failed') || outlived(key);
  // The history event that reserved a record's current attempt: ids rise with every event written.
  const reservedAt = (r: ToolExecutionRecord): number =>
    (histories.get(r.idempotencyKey) ?? []).findLast((e) => e.via === 'reserve')?.id ?? 0;
  v.push(...(await repeatProblems(facts, records, excused, tookEffectAt, reservedAt)));
  for (const [key, history] of histories) v.push(...historyProblems(key, history, byKey.get(key)!));
  for (let i = 0; i < facts.plan.runs.length; i += 1) {
    if ((await store.runs.get(TENANT, runIdOf(i))) === undefined) v.push(`${runIdOf(i)} was never created`);
  }
  // A failed record that took an operator's forced word or a lying hook's is not "standing" to the planner.
  const notStanding = (key: string): boolean => forced(key) || lied(key, 'failed');
  if (facts.plan.workflow) v.push(...(await workflowProblems(facts, records, notStanding)));
  for (const summary of await store.runs.list(TENANT, { limit: 1_000 })) {
    const run = await store.runs.get(TENANT, summary.runId);
    if (run === undefined) continue;
    const calls = records.filter((r) => r.runId === run.runId && r.compensationOf === null);
    const unknown = calls.filter((r) => UNKNOWN.has(r.status));
    if (run.status === 'queued' || run.status === 'running') {
      v.push(
        `${run.runId} is in limbo: ${run.status} when the world ${facts.atHorizon ? 'reached its horizon' : 'went quiet'}`,
      );
    }
    if (run.status === 'completed' && unknown.length > 0) {
      v.push(
        `${run.runId} completed with unknown call(s): ${unknown.map((r) => r.idempotencyKey).join(', ')}`,
      );
    }
    // A repeat may wait for an earlier call of another run (a shared account's tenant-wide window).
    const waitedFor = (run.checkpoint.pending?.calls ?? []).flatMap((c) =>
      c.heard === undefined && c.waitsFor !== undefined ? [c.waitsFor] : [],
    );
    const waitsOnUnknown = waitedFor.some((key) => UNKNOWN.has(byKey.get(key)?.status ?? ''));
    if (run.status === 'awaiting_reconciliation' && unknown.length === 0 && !waitsOnUnknown) {
      v.push(`${run.runId} waits on reconciliation but has no unknown call`);
    }
    const followUps = run.checkpoint.messages.filter(
      (m) => isObject(m) && m.role === 'user' && JSON.stringify(m.content).includes(FOLLOW_UP),
    ).length;
    if (followUps > 1)
      v.push(`${run.runId} holds the user's follow-up ${followUps} times: a resend became a second turn`);
    // Forced past an attempt that landed: nobody saw it land (no conflict), or the run's model has
    // not been asked since the conflict was recorded — the run had ended (a final run's model cannot
    // be told; the conflict is the operator's alarm) or it waits (its model is told at its next call).
    const events = await store.runs.events(TENANT, run.runId, 0, 10_000);
    const lastModelCall = events
      .filter((e) => e.type === 'model.response')
      .reduce((last, e) => (e.at > last ? e.at : last), '');
    const unseen = (key: string): boolean => {
      const conflictAt = byKey.get(key)?.conflictAt ?? null;
      return (forced(key) && (conflictAt === null || conflictAt >= lastModelCall)) || lied(key, 'failed');
    };
    v.push(...beliefProblems(run.runId, run.checkpoint.messages, books, unseen));
  }
  return v;
}

/**
 * The counts behind /metrics, kept by the schema's triggers as the writes happen (PostgreSQL 0017,
 * SQLite 0015), equal the records and runs as they stand, whatever crashed or was cut off mid-write.
 */
async function countProblems(facts: Facts, records: readonly ToolExecutionRecord[]): Promise<string[]> {
  const stats = await facts.store.monitor.stats({ marginMs: 0 });
  const tally = (keys: readonly string[]): Map<string, number> => {
    const counts = new Map<string, number>();
    for (const key of keys) counts.set(key, (counts.get(key) ?? 0) + 1);
    return counts;
  };
  const runs = await facts.store.runs.list(TENANT, { limit: 10_000 });
  const pairs: [string, Map<string, number>, Map<string, number>][] = [
    [
      'calls',
      new Map(stats.calls.map((c) => [`${c.toolName}/${c.status}`, c.count])),
      tally(records.map((r) => `${r.toolName}/${r.status}`)),
    ],
    ['runs', new Map(stats.runs.map((r) => [r.status, r.count])), tally(runs.map((r) => r.status))],
  ];
  const v: string[] = [];
  for (const [what, kept, counted] of pairs) {
    for (const key of new Set([...kept.keys(), ...counted.keys()])) {
      if ((kept.get(key) ?? 0) !== (counted.get(key) ?? 0)) {
        v.push(`the ${what} count of ${key} is ${kept.get(key) ?? 0}, but ${counted.get(key) ?? 0} stand`);
      }
    }
  }
  return v;
}

/**
 * A workflow retry never repeats a standing effect: a node attempt after one whose credit took effect
 * (or was unknown when the node failed) starts only on an operator's `retry`; and the workflow run is
 * not left running when the world is quiet.
 */
async function workflowProblems(
  facts: Facts,
  records: readonly ToolExecutionRecord[],
  forced: (key: string) => boolean,
): Promise<string[]> {
  const v: string[] = [];
  const workflow = await facts.store.workflows.get(TENANT, WORKFLOW_RUN_ID);
  if (workflow === undefined) return [`workflow run ${WORKFLOW_RUN_ID} was never created`];
  if (workflow.status === 'running') {
    v.push(
      `workflow run ${WORKFLOW_RUN_ID} is in limbo: running when the world ${facts.atHorizon ? 'reached its horizon' : 'went quiet'}`,
    );
  }
  const events = await facts.store.workflows.events(TENANT, WORKFLOW_RUN_ID);
  const attempts = events
    .filter((e) => e.kind === 'node.started' && e.node === 'pay' && e.attempt !== null)
    .sort((a, b) => (a.attempt ?? 0) - (b.attempt ?? 0));
  let standing: string | undefined;
  for (const attempt of attempts) {
    const allowed = events.some(
      (e) => e.kind === 'node.retry_allowed' && e.node === 'pay' && e.attempt === attempt.attempt,
    );
    if (standing !== undefined && !allowed) {
      v.push(
        `a workflow retry repeated a standing effect: node pay's attempt ${attempt.attempt} started by itself after ${standing} took effect`,
      );
    }
    const credited = records.find(
      (r) =>
        r.runId === attempt.runId &&
        r.toolName === 'issue_credit' &&
        facts.books.count(r.idempotencyKey) > 0 &&
        !forced(r.idempotencyKey),
    );
    if (credited !== undefined) standing ??= credited.idempotencyKey;
  }
  return v;
}

/**
 * No repeat of a standing effect goes out without an operator's approval or an `allow` policy: of
 * the calls of one run (its turns included) with one tool and one identity (every argument: the
 * default `repeatKey`) whose effects stand in the books, each after the first was approved as a
 * repeat (`repeat_of` set). `excused`: the earlier call was settled `failed` on an operator's forced
 * word or a lying hook's, or its attempt outlived its deadline — the ledger believed it had not
 * taken effect when the later one was planned.
 */
async function repeatProblems(
  facts: Facts,
  records: readonly ToolExecutionRecord[],
  excused: (key: string) => boolean,
  tookEffectAt: (key: string) => string | undefined,
  reservedAt: (record: ToolExecutionRecord) => number,
): Promise<string[]> {
  const v: string[] = [];
  const approvals = new Map(
    (await facts.store.runs.listApprovals(TENANT, { limit: 1_000 })).map((a) => [a.idempotencyKey, a]),
  );
  const planned = new Map(facts.plan.runs.map((run, i) => [runIdOf(i), run]));
  // A guarded call's policy is its own (the tool's, or the call's options'), by its key.
  const guarded = guardedPolicies(facts.plan.guarded);
  const policyOf = (r: ToolExecutionRecord): string | undefined =>
    guarded.get(r.idempotencyKey) ?? planned.get(r.runId)?.onRepeat;
  // A run's calls are one scope, and a guarded call's run or conversation; with a shared account,
  // the credits of every run and caller are one (the credit's tenant-wide window).
  const scopeOf = (r: ToolExecutionRecord): string =>
    facts.plan.sharedCredit && r.toolName === 'issue_credit'
      ? 'tenant'
      : guarded.has(r.idempotencyKey) && r.conversationId !== null
        ? `conversation ${r.conversationId}`
        : r.runId;
  const identityOf = (r: ToolExecutionRecord): string =>
    `${scopeOf(r)} ${r.toolName} ${JSON.stringify(r.args)}`;
  const approvedRepeat = (key: string): boolean => {
    const approval = approvals.get(key);
    return approval?.repeatOf != null && (approval.status === 'approved' || approval.status === 'consumed');
  };
  const groups = new Map<string, ToolExecutionRecord[]>();
  for (const r of records) {
    if (policyOf(r) === undefined || r.compensationOf !== null || r.effect === 'read') continue;
    if (facts.books.count(r.idempotencyKey) === 0) continue;
    const identity = identityOf(r);
    groups.set(identity, [...(groups.get(identity) ?? []), r]);
  }
  for (const group of groups.values()) {
    // In the order their standing attempts were reserved (a call re-opened after its hook found it
    // not taken is made again then, under its own run's policy).
    const [first, ...later] = [...group].sort((a, b) => reservedAt(a) - reservedAt(b));
    for (const r of later) {
      const policy = policyOf(r) ?? 'allow';
      if (policy === 'allow' || excused(first!.idempotencyKey)) continue;
      if (!approvedRepeat(r.idempotencyKey)) {
        v.push(
          `${r.idempotencyKey} repeats ${first!.idempotencyKey} (one tool, one identity, both took effect) without an operator's approval, under on_repeat ${policy}`,
        );
      }
      const known = tookEffectAt(first!.idempotencyKey);
      if (known === undefined || r.attemptStartedAt < known) {
        v.push(
          `${r.idempotencyKey} was reserved while ${first!.idempotencyKey}, which it repeats, was still unknown: nobody could know it would be a second effect`,
        );
      }
    }
  }
  // A guarded repeat is never sent unapproved once the call it repeats is known to have taken
  // effect, whether or not the repeat then lands (a lost request is still one sent out).
  const byKey = new Map(records.map((r) => [r.idempotencyKey, r]));
  const sent = new Set<string>();
  for (const a of facts.books.attempts) {
    const r = byKey.get(a.key);
    const policy = guarded.get(a.key);
    if (r === undefined || policy === undefined || policy === 'allow' || sent.has(a.key)) continue;
    if (approvedRepeat(a.key)) continue;
    const stood = records.find((e) => {
      if (e.idempotencyKey === a.key || e.compensationOf !== null || identityOf(e) !== identityOf(r))
        return false;
      // It took effect (the books), and the ledger knew it before this attempt was sent.
      const known = tookEffectAt(e.idempotencyKey);
      return (
        facts.books.count(e.idempotencyKey) > 0 &&
        known !== undefined &&
        Date.parse(known) < a.atMs &&
        !excused(e.idempotencyKey)
      );
    });
    if (stood === undefined) continue;
    sent.add(a.key);
    v.push(
      `${a.key} (guarded, on_repeat ${policy}) was sent by ${a.process} at ${a.atMs - facts.startMs} ms without an operator's approval, though ${stood.idempotencyKey}, which it repeats, had taken effect`,
    );
  }
  return v;
}

/**
 * A refund (a call that needs an approval) is sent only once an operator approved those arguments,
 * and a rejected one never: each refund attempt has an approval of its key, approved and consumed.
 */
async function approvalProblems(facts: Facts): Promise<string[]> {
  const v: string[] = [];
  const refunds = facts.books.attempts.filter((a) => a.tool === 'issue_refund');
  if (refunds.length === 0) return v;
  const approvals = new Map(
    (await facts.store.runs.listApprovals(TENANT, { limit: 1_000 })).map((a) => [a.idempotencyKey, a]),
  );
  for (const a of refunds) {
    const approval = approvals.get(a.key);
    if (approval?.status !== 'approved' && approval?.status !== 'consumed') {
      v.push(`${a.key} was sent without an approval (${approval?.status ?? 'none asked for'})`);
    }
  }
  return v;
}

/** Every attempt was sent under its run's current lease: none after another process claimed the run. */
async function leaseProblems(facts: Facts): Promise<string[]> {
  const v: string[] = [];
  const claims = new Map<string, { at: number; epoch: number; owner: string }[]>();
  for (const a of facts.books.attempts) {
    if (a.epoch === undefined) continue;
    let ofRun = claims.get(a.runId);
    if (ofRun === undefined) {
      ofRun = (await facts.store.runs.lastClaims(TENANT, a.runId, 1_000)).flatMap((e) =>
        isObject(e.data) && typeof e.data.epoch === 'number'
          ? [
              {
                at: Date.parse(e.at),
                epoch: e.data.epoch,
                owner: typeof e.data.owner === 'string' ? e.data.owner : '?',
              },
            ]
          : [],
      );
      claims.set(a.runId, ofRun);
    }
    const taken = ofRun.find((c) => c.epoch > a.epoch! && c.at < a.atMs);
    if (taken !== undefined) {
      v.push(
        `${a.key} was sent by ${a.process} under lease epoch ${a.epoch} at ${a.atMs - facts.startMs} ms, after ${taken.owner} claimed ${a.runId} (epoch ${taken.epoch}) at ${taken.at - facts.startMs} ms`,
      );
    }
  }
  return v;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function historyProblems(key: string, history: LedgerEvent[], record: ToolExecutionRecord): string[] {
  const v: string[] = [];
  let last: LedgerEvent | undefined;
  let state: string | null = null;
  for (const e of history) {
    if (last !== undefined && e.id <= last.id)
      v.push(`${key}: history ids not rising (${last.id} then ${e.id})`);
    if (last !== undefined && e.at < last.at)
      v.push(`${key}: history went back in time (${last.at} then ${e.at})`);
    if (e.kind === 'transition') {
      if (state !== null && e.from !== state)
        v.push(`${key}: a transition from ${e.from} while the record was ${state}`);
      state = e.to;
    }
    last = e;
  }
  if (state !== null && state !== record.status)
    v.push(`${key}: its history ends at ${state}, the record says ${record.status}`);
  return v;
}

/** The model told a call did not take effect, whose effect stands, and never corrected. */
function beliefProblems(
  runId: string,
  messages: readonly JsonValue[],
  books: Books,
  excused: (key: string) => boolean,
): string[] {
  const toldNot = new Set<string>();
  const corrected = new Set<string>();
  for (const m of messages) {
    if (!isObject(m)) continue;
    if (m.role === 'tool' && Array.isArray(m.content)) {
      for (const part of m.content) {
        if (!isObject(part) || !isObject(part.output) || !isObject(part.output.value)) continue;
        const status = part.output.value.status;
        if (typeof part.toolCallId !== 'string') continue;
        const id = part.toolCallId;
        if (status === 'did_not_take_effect' || status === 'not_attempted') toldNot.add(id);
        else toldNot.delete(id);
      }
    }
    const oncely =
      isObject(m.providerOptions) && isObject(m.providerOptions.oncely)
        ? m.providerOptions.oncely
        : undefined;
    if (oncely !== undefined && Array.isArray(oncely.corrects))
      for (const id of oncely.corrects) if (typeof id === 'string') corrected.add(id);
  }
  const v: string[] = [];
  for (const id of toldNot) {
    const key = `${runId}:${id}`;
    if (books.count(key) > 0 && !books.undone.has(key) && !corrected.has(id) && !excused(key)) {
      v.push(`the model of ${runId} was told ${key} did not take effect; it did, and it was never corrected`);
    }
  }
  return v;
}
