import { executeToolCall } from '../calls/index.js';
import type { Compensation, Run, ToolExecution } from '../api/client-types.js';
import type { ScriptToolCall } from '../models/index.js';
import { DEMO_TENANT, type DemoWorld } from './demo-world.js';
import { fact, type Fact, type ScenarioReport } from './facts.js';
import {
  answerOf,
  billingFor,
  callsOf,
  heardBy,
  moves,
  runReaches,
  startRun,
  story,
  unknownKeys,
} from './observe.js';

const ENDED = ['completed', 'failed', 'cancelled', 'awaiting_approval', 'awaiting_reconciliation'];

export interface Scenario {
  readonly number: 1 | 2 | 3 | 4;
  readonly title: string;
  /** The agent of this scenario, and the calls its model asks for first. */
  readonly agent: string;
  readonly calls: readonly ScriptToolCall[];
  readonly input: string;
  play(world: DemoWorld): Promise<ScenarioReport>;
}

const credit = (accountId: string, amountCents: number): ScriptToolCall => ({
  toolName: 'issue_credit',
  input: { accountId, amountCents },
});

/** What every scenario reports: the run, its calls' stories, what the model heard, the billing count. */
async function report(
  world: DemoWorld,
  scenario: Scenario,
  run: Run,
  extra: { operator?: string[]; facts: (r: Omit<ScenarioReport, 'facts'>) => Fact[] },
): Promise<ScenarioReport> {
  const records = await callsOf(world, run.run_id);
  const calls = await Promise.all(records.map((r) => story(world, r.idempotency_key)));
  const base = {
    number: scenario.number,
    title: scenario.title,
    runId: run.run_id,
    runStatus: run.status,
    calls,
    heard: heardBy(world, scenario.agent),
    answer: answerOf(run),
    billing: billingFor(
      world,
      records.map((r) => r.idempotency_key),
    ),
    operator: extra.operator ?? [],
  };
  return { ...base, facts: extra.facts(base) };
}

const applied: Scenario = {
  number: 1,
  title: 'A credit applied before the timeout',
  agent: 'applied-before-timeout',
  calls: [credit('acct_1001', 2500)],
  input: 'Please credit $25.00 to acct_1001.',
  async play(world) {
    world.parts.billing.failNext('timeout-after-apply', 1_000);
    const started = await startRun(world, this.agent, this.input);
    const run = await runReaches(world, started.run_id, ENDED);
    await world.parts.runtime.ledger.drain({ timeoutMs: 5_000 }); // the late answer of the timed-out attempt
    return report(world, this, run, {
      facts: (r) => {
        const [call] = r.calls;
        const [heard] = r.heard;
        const receipt = world.parts.billing.appliedFor(call?.key ?? '')[0]?.id;
        return [
          fact('the run completed', 'completed', r.runStatus),
          fact(
            'the call timed out (indeterminate), then the reconcile hook found it: completed',
            ['transition:started:runtime', 'transition:indeterminate:runtime', 'transition:completed:hook'],
            call === undefined ? [] : moves(call),
          ),
          fact(
            'the model heard "completed", with the real receipt',
            ['completed', receipt],
            [heard?.status, (heard?.value.result as { creditId?: string } | undefined)?.creditId],
          ),
          fact('the billing service applied one credit', { credits: 1, standing: 1, voids: 0 }, r.billing),
        ];
      },
    });
  },
};

const neverLanded: Scenario = {
  number: 2,
  title: 'A credit that never landed',
  agent: 'never-landed',
  calls: [credit('acct_2002', 4000)],
  input: 'Please credit $40.00 to acct_2002.',
  async play(world) {
    world.parts.billing.failNext('timeout-before-apply', 800);
    const started = await startRun(world, this.agent, this.input);
    const paused = await runReaches(world, started.run_id, ENDED);
    const key = paused.pending_calls[0]?.idempotency_key ?? '';
    const listed = (await unknownKeys(world)).includes(key);
    const reason = 'no credit under this key in the billing console';
    await world.parts.api.post<ToolExecution>(`/v1/tool-executions/${key}/resolve`, {
      status: 'failed',
      reason,
    });
    const run = await runReaches(world, started.run_id, ['completed', 'failed', 'awaiting_reconciliation']);
    await world.parts.runtime.ledger.drain({ timeoutMs: 5_000 });
    return report(world, this, run, {
      operator: [`resolve ${key} → failed: "${reason}"`],
      facts: (r) => {
        const [call] = r.calls;
        const [heard] = r.heard;
        return [
          fact('the run paused, waiting for reconciliation', 'awaiting_reconciliation', paused.status),
          fact("the call was in the operator's list of unknown calls", true, listed),
          fact(
            'the hook could not tell; the operator settled it "failed"',
            [
              'transition:started:runtime',
              'transition:indeterminate:runtime',
              'note:-:hook',
              'transition:failed:operator',
            ],
            // The hook is asked again once the attempt can no longer land: its notes count as one.
            call === undefined
              ? []
              : moves(call).filter((m, i, all) => m !== 'note:-:hook' || all[i - 1] !== m),
          ),
          fact('the run resumed and completed', 'completed', r.runStatus),
          fact(
            'the model heard that the credit did not take effect, and why',
            ['did_not_take_effect', reason],
            [heard?.status, heard?.value.reason],
          ),
          fact('the billing service applied no credit', { credits: 0, standing: 0, voids: 0 }, r.billing),
        ];
      },
    });
  },
};

const shouldNotStand: Scenario = {
  number: 3,
  title: 'A credit that should not stand',
  agent: 'should-not-stand',
  calls: [
    credit('acct_3003', 1500),
    {
      toolName: 'notify_customer',
      input: { accountId: 'acct_3003', message: 'We credited $15.00 to your account.' },
    },
  ],
  input: 'Credit $15.00 to acct_3003 and let them know.',
  async play(world) {
    const started = await startRun(world, this.agent, this.input);
    const waiting = await runReaches(world, started.run_id, ENDED);
    const [creditKey, notifyKey] = waiting.pending_calls.map((c) => c.idempotency_key);
    const why = 'a duplicate of a goodwill credit issued by phone';
    // Two operators press "compensate" at the same moment: the hook voids the credit once.
    const both = await Promise.all(
      [1, 2].map(() =>
        world.parts.api.post<Compensation>(`/v1/tool-executions/${creditKey ?? ''}/compensate`, {
          reason: why,
        }),
      ),
    );
    const rejection = 'the credit was reversed; do not e-mail the customer';
    await world.parts.api.post(`/v1/approvals/${notifyKey ?? ''}/reject`, { reason: rejection });
    const run = await runReaches(world, started.run_id, ['completed', 'failed']);
    return report(world, this, run, {
      operator: [
        `compensate ${creditKey ?? ''} (sent twice at once): "${why}"`,
        `reject ${notifyKey ?? ''}: "${rejection}"`,
      ],
      facts: (r) => {
        const byKey = new Map(r.calls.map((c) => [c.key, c.status]));
        return [
          fact('the run waited for the approval of the e-mail', 'awaiting_approval', waiting.status),
          fact(
            'both compensate requests answered with the one compensation: one ran it, one found it running or done',
            [[`${creditKey ?? ''}:compensation`, `${creditKey ?? ''}:compensation`], true],
            [
              both.map((b) => b.compensation.idempotency_key),
              both.some((b) => b.status === 'compensated') &&
                both.every((b) => b.status === 'compensated' || b.status === 'in_progress'),
            ],
          ),
          fact(
            'the credit is compensated; its compensation ran once, as its own call',
            ['compensated', 'completed'],
            [byKey.get(creditKey ?? ''), byKey.get(`${creditKey ?? ''}:compensation`)],
          ),
          fact(
            'the billing service applied one credit, voided it, and was asked to void once',
            { credits: 1, standing: 0, voids: 1 },
            r.billing,
          ),
          fact(
            'the model heard the credit was compensated and the e-mail rejected',
            [
              ['compensated', why],
              ['rejected', rejection],
            ],
            r.heard.map((h) => [h.status, h.value.reason]),
          ),
          fact('no e-mail was sent', 0, world.parts.outbox.size),
          fact('the run completed', 'completed', r.runStatus),
        ];
      },
    });
  },
};

const refused: Scenario = {
  number: 4,
  title: 'A call refused before anything was sent',
  agent: 'refused-before-sending',
  calls: [credit('acct_4004', 1000)],
  input: 'Please credit $10.00 to acct_4004.',
  async play(world) {
    world.parts.token.valid = false; // the billing API token expired
    const started = await startRun(world, this.agent, this.input);
    const run = await runReaches(world, started.run_id, ENDED);
    const key = (await callsOf(world, run.run_id))[0]?.idempotency_key ?? '';
    const listed = (await unknownKeys(world)).includes(key);
    const sentBefore = world.parts.billing.requests.get(key) ?? 0;
    // Once the token is refreshed, the same call may run again: same key, attempt 2.
    world.parts.token.valid = true;
    const again = await executeToolCall(
      world.parts.runtime.ledger,
      world.parts.tools.issueCredit,
      this.calls[0]?.input,
      { tenantId: DEMO_TENANT, runId: run.run_id, toolCallId: key.slice(run.run_id.length + 1) },
    );
    return report(world, this, run, {
      operator: [
        `refreshed the token; ran ${key} again (same key) → ${again.status}, attempt ${again.record.attempt}`,
      ],
      facts: (r) => {
        const [call] = r.calls;
        const [heard] = r.heard;
        return [
          fact('the run completed, the model told', 'completed', r.runStatus),
          fact('nothing reached the billing service', 0, sentBefore),
          fact('the call was recorded failed (not attempted), nothing to reconcile', false, listed),
          fact('the model heard "not attempted"', 'not_attempted', heard?.status),
          fact(
            'run again once fixed: same key, attempt 2, completed',
            ['completed', 2],
            [again.status, again.record.attempt],
          ),
          fact(
            'the ledger shows the refusal, then the second attempt',
            [
              'transition:started:runtime',
              'transition:failed:runtime',
              'transition:started:runtime',
              'transition:completed:runtime',
            ],
            call === undefined ? [] : moves(call),
          ),
          fact(
            'the billing service applied one credit, on the second attempt',
            { credits: 1, standing: 1, voids: 0 },
            r.billing,
          ),
        ];
      },
    });
  },
};

export const SCENARIOS: readonly Scenario[] = [applied, neverLanded, shouldNotStand, refused];
