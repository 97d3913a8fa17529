import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { LedgerStatus } from '../ledger/index.js';
import type { RunRecord, RunStatus } from '../run-state/index.js';
import type { WorkflowEvent } from '../store/workflow-store.js';
import { defineWorkflow, nodeRunId, RECOVERY_POLICIES } from './define-workflow.js';
import { planWorkflow, type StandingCall } from './plan.js';

/*
 * The planner's one promise about effects, over every mix of policy, attempts, run outcomes, calls
 * that stand and operator decisions: a node's next run starts only when nothing of its failed run
 * stands (its policy retries, within max_attempts, after the backoff) or an operator allowed it; a
 * retry node whose failed run left a call that took effect or may have waits for an operator and
 * names that call; a run started by an operator's decision despite standing calls is told of them.
 */

const WF = 'wf_prop';
const ENDED_AT = '2026-01-01T00:00:00.000Z';
const NOW = Date.parse(ENDED_AT) + 86_400_000 * 2; // every backoff has passed

const standingStatus = fc.constantFrom<LedgerStatus | 'conflict'>(
  'completed',
  'compensated',
  'started',
  'indeterminate',
  'conflict',
);

const scenario = fc.record({
  policy: fc.constantFrom(...RECOVERY_POLICIES),
  maxAttempts: fc.integer({ min: 1, max: 4 }),
  attempts: fc.integer({ min: 1, max: 3 }),
  latest: fc.constantFrom<RunStatus>('failed', 'cancelled', 'completed', 'running'),
  standing: fc.array(standingStatus, { maxLength: 3 }),
  allowed: fc.boolean(),
  allowedWithCalls: fc.boolean(),
});

function run(runId: string, status: RunStatus): RunRecord {
  return {
    runId,
    status,
    result: status === 'completed' ? { text: 'done' } : null,
    error: status === 'failed' ? { code: 'RUN_MAX_STEPS', message: 'max_steps' } : null,
    statusReason: null,
    updatedAt: ENDED_AT,
  } as unknown as RunRecord;
}

function event(
  id: number,
  kind: WorkflowEvent['kind'],
  attempt: number,
  detail: WorkflowEvent['detail'] = null,
) {
  return {
    id,
    tenantId: 't',
    workflowRunId: WF,
    at: ENDED_AT,
    kind,
    node: 'pay',
    attempt,
    runId: kind === 'node.started' ? nodeRunId(WF, 'pay', attempt) : null,
    reason: null,
    detail,
  } satisfies WorkflowEvent;
}

describe('planWorkflow and the calls that stand', () => {
  it('starts a next run only when nothing stands or an operator allowed it, and tells it what stands', () => {
    fc.assert(
      fc.property(scenario, (s) => {
        const workflow = defineWorkflow({
          name: 'prop',
          nodes: {
            pay: {
              agent: 'payer',
              recoveryPolicy: s.policy,
              ...(s.policy === 'retry' ? { maxAttempts: s.maxAttempts, backoffMs: 10 } : {}),
            },
          },
        });
        const latestId = nodeRunId(WF, 'pay', s.attempts);
        const calls: StandingCall[] = s.standing.map((status, i) => ({
          idempotencyKey: `${latestId}:call_${i}`,
          toolName: 'issue_credit',
          status: status === 'conflict' ? 'failed' : status,
          conflict: status === 'conflict',
          resultReference: null,
        }));
        const runs = new Map<string, RunRecord>();
        const events: WorkflowEvent[] = [];
        for (let a = 1; a <= s.attempts; a += 1) {
          const id = nodeRunId(WF, 'pay', a);
          runs.set(id, run(id, a === s.attempts ? s.latest : 'failed'));
          events.push(event(events.length + 1, 'node.started', a));
        }
        const ended = s.latest === 'failed' || s.latest === 'cancelled';
        const standingCallsOf = new Map(ended && calls.length > 0 ? [[latestId, calls]] : []);
        const allowedCalls = s.allowedWithCalls && calls.length > 0;
        if (s.allowed && ended) {
          const detail: WorkflowEvent['detail'] = allowedCalls
            ? { by: 'ops', runId: latestId, standingCalls: calls.map((c) => ({ ...c })) }
            : { by: 'ops' };
          events.push(event(events.length + 1, 'node.retry_allowed', s.attempts + 1, detail));
        }
        const plan = planWorkflow({
          workflow,
          workflowRunId: WF,
          input: 'go',
          events,
          runs,
          standingCallsOf,
          nowMs: NOW,
        });
        const next = plan.start.find((st) => st.attempt === s.attempts + 1);
        const operatorAllowed = s.allowed && ended;
        const retriesByItself =
          s.policy === 'retry' &&
          s.latest === 'failed' &&
          calls.length === 0 &&
          s.attempts + 1 <= s.maxAttempts;
        expect(next !== undefined).toBe(operatorAllowed || retriesByItself);
        if (next !== undefined) {
          expect(next.notice !== undefined).toBe(operatorAllowed && allowedCalls);
          for (const c of operatorAllowed && allowedCalls ? calls : []) {
            expect(next.notice).toContain(c.idempotencyKey);
          }
        }
        const [node] = plan.nodes;
        const mustWait =
          !operatorAllowed &&
          s.policy === 'retry' &&
          s.latest === 'failed' &&
          calls.length > 0 &&
          s.attempts + 1 <= s.maxAttempts;
        if (mustWait) {
          expect(plan.status).toBe('awaiting_operator');
          expect(node?.state).toBe('failed');
          expect(node?.standingCalls).toEqual(calls);
          for (const c of calls) expect(plan.statusReason).toContain(c.idempotencyKey);
        }
      }),
      { numRuns: 500 },
    );
  });
});
