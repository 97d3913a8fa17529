import type { Runtime } from '../src/runs/index.js';
import type { OperatorAction } from './plan.js';
import type { WorkflowEngine } from '../src/workflows/index.js';
import { FOLLOW_UP, runIdOf, TENANT, WORKFLOW_RUN_ID, type Books } from './world.js';

/*
 * An operator at the API layer, acting through the runtime's operator actions while the workers run:
 * settles an unknown call as the downstream's books say (refused while its attempt may still land),
 * settles several together as the books say (one batch for those that took effect, one for those
 * that did not; each call its own compare-and-set), asks an unknown call's reconcile hook now,
 * forces `failed` on a call whose effect has not landed yet (a person who would not wait), compensates
 * a credit, approves or rejects a call waiting for approval (a refund, or a repeat: a run's or a
 * guarded caller's, which belongs to no run), approves a repeat waiting for approval, retries a failed run, cancels one; and
 * a user who writes again to a run that answered (and sends it twice, the first answer lost).
 */

const OPERATOR = 'ops-sim';
const UNKNOWN = ['started', 'indeterminate'] as const;

export async function operatorAct(
  action: OperatorAction,
  runtime: Runtime,
  workflows: WorkflowEngine | undefined,
  books: Books,
  say: (what: string) => void,
): Promise<void> {
  const ledger = runtime.store.ledger;
  switch (action) {
    case 'resolve-truth': {
      const [call] = await ledger.list(TENANT, { statuses: [...UNKNOWN], limit: 1 });
      if (call === undefined) return say('resolve: no unknown call');
      const took = books.count(call.idempotencyKey) > 0;
      say(`resolve ${call.idempotencyKey} ${took ? 'completed' : 'failed'} (the books)`);
      await runtime.resolve({
        tenantId: TENANT,
        idempotencyKey: call.idempotencyKey,
        status: took ? 'completed' : 'failed',
        reason: 'checked the downstream books',
        actorId: OPERATOR,
        ...(took ? { resultReference: `rcpt_${call.idempotencyKey}` } : {}),
      });
      return;
    }
    case 'resolve-force-failed': {
      const calls = await ledger.list(TENANT, { statuses: ['started'], limit: 5 });
      // Nothing in the books yet: a call's effect is counted by its key, a compensation's undo by
      // the key of the call it undoes.
      const call = calls.find((c) =>
        c.compensationOf === null
          ? c.effect !== 'read' && books.count(c.idempotencyKey) === 0
          : !books.undone.has(c.compensationOf),
      );
      if (call === undefined) return say('force: no started call without an effect');
      say(`force failed ${call.idempotencyKey}`);
      await runtime.resolve({
        tenantId: TENANT,
        idempotencyKey: call.idempotencyKey,
        status: 'failed',
        reason: 'nothing in the books yet; not waiting',
        actorId: OPERATOR,
        force: true,
      });
      return;
    }
    case 'resolve-together': {
      const calls = await ledger.list(TENANT, { statuses: [...UNKNOWN], limit: 4 });
      if (calls.length === 0) return say('resolve together: no unknown call');
      const took = calls.filter((c) => books.count(c.idempotencyKey) > 0).map((c) => c.idempotencyKey);
      const not = calls.filter((c) => books.count(c.idempotencyKey) === 0).map((c) => c.idempotencyKey);
      for (const [keys, status] of [
        [took, 'completed'],
        [not, 'failed'],
      ] as const) {
        if (keys.length === 0) continue;
        const done = await runtime.resolveTogether({
          tenantId: TENANT,
          keys,
          status,
          reason: 'checked the downstream books for these together',
          actorId: OPERATOR,
        });
        say(
          `resolve together ${status}: ${done.settled.map((r) => r.idempotencyKey).join(', ') || 'none'}` +
            (done.movedOn.length === 0
              ? ''
              : `; moved on: ${done.movedOn.map((m) => `${m.idempotencyKey} (${m.code})`).join(', ')}`),
        );
      }
      return;
    }
    case 'ask-hook': {
      const calls = await ledger.list(TENANT, { statuses: [...UNKNOWN], limit: 5 });
      const call = calls.find((c) => c.compensationOf === null);
      if (call === undefined) return say('ask hook: no unknown call');
      const asked = await runtime.askHook({
        tenantId: TENANT,
        idempotencyKey: call.idempotencyKey,
        actorId: OPERATOR,
      });
      say(
        `ask the hook of ${call.idempotencyKey} now: ${asked.said?.to ?? 'a note'} (${asked.record.status})`,
      );
      return;
    }
    case 'compensate':
    case 'compensate-twice': {
      // Asking again is allowed (and answered from the record): the second of two operators who
      // clicked at the same moment, or one who asks about a compensation already made.
      const [call] = await ledger.list(TENANT, {
        statuses: ['completed', 'compensated'],
        toolName: 'issue_credit',
        limit: 1,
      });
      if (call === undefined) return say(`${action}: no completed credit`);
      const once = async (who: string): Promise<void> => {
        say(`${who} compensates ${call.idempotencyKey}`);
        const outcome = await runtime.compensate({
          tenantId: TENANT,
          idempotencyKey: call.idempotencyKey,
          reason: 'the customer returned the goods',
          actorId: who,
        });
        say(`${who}: compensate ${call.idempotencyKey}: ${outcome.status}`);
      };
      await (action === 'compensate' ? once(OPERATOR) : Promise.all([once(OPERATOR), once(`${OPERATOR}-2`)]));
      return;
    }
    case 'approve':
    case 'reject': {
      const [pending] = await runtime.store.runs.listApprovals(TENANT, { statuses: ['pending'], limit: 1 });
      if (pending === undefined) return say(`${action}: no call waits for approval`);
      say(`${action} ${pending.idempotencyKey}`);
      if (action === 'approve')
        await runtime.approve({
          tenantId: TENANT,
          idempotencyKey: pending.idempotencyKey,
          actorId: OPERATOR,
        });
      else
        await runtime.reject({
          tenantId: TENANT,
          idempotencyKey: pending.idempotencyKey,
          actorId: OPERATOR,
          reason: 'the order was never paid',
        });
      return;
    }
    case 'approve-repeat': {
      // A repeat waiting for approval (of a run's call, or a guarded call's, which belongs to no run).
      const pending = await runtime.store.runs.listApprovals(TENANT, { statuses: ['pending'], limit: 20 });
      const repeat = pending.find((a) => a.repeatOf !== null);
      if (repeat === undefined) return say('approve-repeat: no repeat waits for approval');
      say(`approve ${repeat.idempotencyKey}, a repeat of ${repeat.repeatOf}`);
      await runtime.approve({ tenantId: TENANT, idempotencyKey: repeat.idempotencyKey, actorId: OPERATOR });
      return;
    }
    case 'send': {
      // The user writes again to the first run that answered, and (the answer lost) sends it again.
      for (let i = 0; ; i += 1) {
        const run = await runtime.store.runs.get(TENANT, runIdOf(i));
        if (run === undefined) return say('send: no run has answered');
        if (run.status !== 'completed') continue;
        const message = { tenantId: TENANT, runId: run.runId, content: FOLLOW_UP, clientMessageId: `m-${i}` };
        const first = await runtime.send(message);
        const again = await runtime.send(message);
        say(
          `user writes to ${run.runId}: turn ${first.turn.turn} (sent ${first.sent}), again: sent ${again.sent}`,
        );
        return;
      }
    }
    case 'decide-retry':
    case 'decide-skip': {
      const waiting = workflows === undefined ? undefined : await workflows.get(TENANT, WORKFLOW_RUN_ID);
      const node = waiting?.nodes.find((n) => n.state === 'failed');
      if (workflows === undefined || waiting?.status !== 'awaiting_operator' || node === undefined) {
        return say(`${action}: no workflow run waiting`);
      }
      const decision = action === 'decide-retry' ? 'retry' : 'skip';
      say(
        `${decision} node ${node.name} (standing: ${node.standingCalls.map((c) => c.idempotencyKey).join(', ') || 'none'})`,
      );
      await workflows.decide(TENANT, WORKFLOW_RUN_ID, {
        node: node.name,
        action: decision,
        reason: 'checked what stands',
        actorId: OPERATOR,
      });
      return;
    }
    case 'retry':
    case 'cancel': {
      for (let i = 0; ; i += 1) {
        const run = await runtime.store.runs.get(TENANT, runIdOf(i));
        if (run === undefined) return say(`${action}: no run to ${action}`);
        const fits =
          action === 'retry'
            ? run.status === 'failed'
            : !['completed', 'failed', 'cancelled'].includes(run.status);
        if (!fits) continue;
        say(`${action} ${run.runId} (${run.status})`);
        if (action === 'retry')
          await runtime.retry(TENANT, run.runId, { reason: 'the cause is fixed', actorId: OPERATOR });
        else await runtime.cancel(TENANT, run.runId, { reason: 'the customer withdrew', actorId: OPERATOR });
        return;
      }
    }
  }
}
