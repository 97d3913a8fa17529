import fc from 'fast-check';
import { CRASH_POINTS, WORKFLOW_CRASH_POINTS } from '../src/crash/index.js';

/*
 * One schedule's world, as fast-check draws it from the seed: the runs and what their model asks
 * for, how the downstreams answer each request, what the reconcile hook does, which process dies,
 * freezes or is restarted when, what the operator does when, and the choices that order every
 * store call of every process. Everything is a list fast-check can shrink: a failing schedule shrinks
 * to the fewest runs, faults, actions and choices that still fail.
 */

export const PROCESSES = 3;

export const TOOL_NAMES = [
  'issue_credit',
  'send_email',
  'lookup_order',
  'open_ticket',
  'issue_refund',
] as const;
export type ToolName = (typeof TOOL_NAMES)[number];
/** The tools that change the world, each a service with books of its own. */
export type WriteTool = Exclude<ToolName, 'lookup_order'>;

/** How a downstream handles one request. */
export const BEHAVIOURS = [
  'ok', // applies, answers soon
  'slow', // applies late (before the tool's timeout plus the margin), answers after the tool gave up
  'lost', // never reaches the service: no effect, no answer
  'refused', // refused before anything was sent (ToolNotAttemptedError): no effect
  'applied-then-error', // applies, then answers an error
  'error-before', // answers an error without applying
] as const;
export type Behaviour = (typeof BEHAVIOURS)[number];

export const HOOK_BEHAVIOURS = ['truth', 'unknown', 'throws', 'hangs', 'garbage', 'lies'] as const;
export type HookBehaviour = (typeof HOOK_BEHAVIOURS)[number];

export interface RunPlan {
  /** The agent: its unknown calls pause the run, or fail it. */
  readonly onIndeterminate: 'pause' | 'fail';
  /** The model's tool calls in its first response (then it answers in text). */
  readonly calls: readonly ToolName[];
  /** How many credits (to different accounts) that response asks for, when it asks for any: 1-3. */
  readonly credits: number;
  /** The model repeats its first response's calls once more (a model that "tries again"). */
  readonly repeats: boolean;
  /** The model's first answer never comes (a provider that hangs): the agent's model timeout ends it. */
  readonly stalls: boolean;
  /** The agent's repeat policy: what happens when its model makes the same call again. */
  readonly onRepeat: 'ask' | 'refuse' | 'allow';
  /** A user who writes again asks for the very first credit again ("it did not arrive, just try again"). */
  readonly againSame: boolean;
}

export type Fault =
  | { readonly kind: 'crash'; readonly process: number; readonly atGate: number; readonly after: boolean }
  | { readonly kind: 'crash-point'; readonly process: number; readonly point: string; readonly nth: number }
  | { readonly kind: 'freeze'; readonly process: number; readonly atMs: number; readonly forMs: number }
  /** Cut off from the store: each of its store calls in the window fails as an unreachable database's would. */
  | { readonly kind: 'partition'; readonly process: number; readonly atMs: number; readonly forMs: number };

export const OPERATOR_ACTIONS = [
  'resolve-truth',
  'resolve-force-failed',
  'resolve-together',
  'ask-hook',
  'compensate',
  'compensate-twice',
  'retry',
  'cancel',
  'approve',
  'reject',
  'send',
  'decide-retry',
  'decide-skip',
  'approve-repeat',
] as const;
export type OperatorAction = (typeof OPERATOR_ACTIONS)[number];

export interface OperatorStep {
  readonly atMs: number;
  readonly action: OperatorAction;
}

/**
 * One credit a guarded caller makes (`executeToolCall`, or `executeToolCalls` beside a read when
 * `batch`): to one of two accounts, so that steps repeat one another (same arguments, a new tool
 * call id); or the step before made again (`replay`: same tool call id, same key).
 */
export interface GuardedStep {
  /** The account credited: 0 or 1. */
  readonly account: number;
  /** The same call as the step before (same tool call id, run, arguments and policy). */
  readonly replay: boolean;
  /** Its run id: `guard_0` or `guard_1` (no run of the runtime: a caller's own id). */
  readonly run: number;
  /** Made in the caller's one conversation (its repeats are guarded there, across its run ids). */
  readonly inConversation: boolean;
  readonly onRepeat: 'ask' | 'refuse' | 'allow';
  /** The policy given as the tool's own `onRepeat`, or as the call's `CallOptions.onRepeat`. */
  readonly via: 'tool' | 'options';
  /** Made with `executeToolCalls`, together with a read (a batch: the gate reads before reserving). */
  readonly batch: boolean;
}

/**
 * A caller of guarded calls (what the AI SDK adapter and direct users call), living in one of the
 * worker processes: it dies, freezes and is cut off with it, and when that process is restarted it
 * makes its calls again from the first (same tool call ids). It makes its steps in order, then makes
 * again, a few times, those that were not settled (unknown, waiting for an approval or for an
 * earlier call, the store unreachable).
 */
export interface GuardedPlan {
  readonly process: number;
  readonly startMs: number;
  readonly steps: readonly GuardedStep[];
}

export interface SchedulePlan {
  readonly runs: readonly RunPlan[];
  /** A guarded caller beside the runs (absent: none). */
  readonly guarded?: GuardedPlan;
  /**
   * A workflow run beside the runs: node `pay` (an agent that credits, then runs out of steps:
   * `recovery_policy: retry`, 3 attempts) and node `notify` after it.
   */
  readonly workflow: boolean;
  /**
   * Every run's first credit is to one shared account, and the credit tool looks for repeats across
   * the tenant (`repeatWindowMs`): a run's credit repeats another run's, perhaps while that one is
   * still in flight or unknown (the repeat then waits for it).
   */
  readonly sharedCredit: boolean;
  readonly behaviours: { readonly [T in WriteTool]: readonly Behaviour[] };
  readonly hook: readonly HookBehaviour[];
  readonly faults: readonly Fault[];
  readonly restartAfterMs: number;
  readonly operator: readonly OperatorStep[];
  /** Orders the store calls: at each point, the `choices[i] % n`-th of the n calls waiting goes next. */
  readonly choices: readonly number[];
  /** Seeds the ids and jitter the runtime draws (so a replay has the same ids). */
  readonly randomSeed: number;
}

const runPlan: fc.Arbitrary<RunPlan> = fc.record({
  onIndeterminate: fc.constantFrom('pause' as const, 'fail' as const),
  calls: fc.subarray([...TOOL_NAMES], { minLength: 1 }),
  credits: fc.integer({ min: 1, max: 3 }),
  repeats: fc.boolean(),
  stalls: fc.boolean(),
  onRepeat: fc.constantFrom('ask' as const, 'refuse' as const, 'allow' as const),
  againSame: fc.boolean(),
});

const fault: fc.Arbitrary<Fault> = fc.oneof(
  fc.record({
    kind: fc.constant('crash' as const),
    process: fc.nat({ max: PROCESSES - 1 }),
    atGate: fc.nat({ max: 120 }),
    after: fc.boolean(),
  }),
  fc.record({
    kind: fc.constant('crash-point' as const),
    process: fc.nat({ max: PROCESSES - 1 }),
    point: fc.constantFrom(...CRASH_POINTS, ...WORKFLOW_CRASH_POINTS),
    nth: fc.integer({ min: 1, max: 3 }),
  }),
  fc.record({
    kind: fc.constant('freeze' as const),
    process: fc.nat({ max: PROCESSES - 1 }),
    atMs: fc.nat({ max: 3_000 }),
    forMs: fc.integer({ min: 100, max: 4_000 }),
  }),
  fc.record({
    kind: fc.constant('partition' as const),
    process: fc.nat({ max: PROCESSES - 1 }),
    atMs: fc.nat({ max: 3_000 }),
    forMs: fc.integer({ min: 50, max: 3_000 }),
  }),
);

const guardedStep: fc.Arbitrary<GuardedStep> = fc.record({
  account: fc.nat({ max: 1 }),
  replay: fc.boolean(),
  run: fc.nat({ max: 1 }),
  inConversation: fc.boolean(),
  onRepeat: fc.constantFrom('ask' as const, 'refuse' as const, 'allow' as const),
  via: fc.constantFrom('tool' as const, 'options' as const),
  batch: fc.boolean(),
});

const guardedPlan: fc.Arbitrary<GuardedPlan> = fc.record({
  process: fc.constantFrom(...Array.from({ length: PROCESSES }, (_, i) => i)),
  startMs: fc.nat({ max: 1_000 }),
  steps: fc.array(guardedStep, { minLength: 1, maxLength: 4 }),
});

export const schedulePlan: fc.Arbitrary<SchedulePlan> = fc.record(
  {
    runs: fc.array(runPlan, { minLength: 1, maxLength: 3 }),
    guarded: guardedPlan,
    workflow: fc.boolean(),
    sharedCredit: fc.boolean(),
    behaviours: fc.record({
      issue_credit: fc.array(fc.constantFrom(...BEHAVIOURS), { maxLength: 6 }),
      send_email: fc.array(fc.constantFrom(...BEHAVIOURS), { maxLength: 6 }),
      open_ticket: fc.array(fc.constantFrom(...BEHAVIOURS), { maxLength: 6 }),
      issue_refund: fc.array(fc.constantFrom(...BEHAVIOURS), { maxLength: 4 }),
    }),
    hook: fc.array(fc.constantFrom(...HOOK_BEHAVIOURS), { maxLength: 4 }),
    faults: fc.array(fault, { maxLength: 3 }),
    restartAfterMs: fc.integer({ min: 0, max: 3_000 }),
    operator: fc.array(
      fc.record({
        // Most operators act while the calls are young (in flight, just unknown); some much later.
        atMs: fc.oneof(fc.nat({ max: 600 }), fc.nat({ max: 8_000 })),
        action: fc.constantFrom(...OPERATOR_ACTIONS),
      }),
      { maxLength: 4 },
    ),
    choices: fc.array(fc.nat({ max: 1_000 }), { maxLength: 300 }),
    randomSeed: fc.nat(),
  },
  {
    requiredKeys: [
      'runs',
      'workflow',
      'sharedCredit',
      'behaviours',
      'hook',
      'faults',
      'restartAfterMs',
      'operator',
      'choices',
      'randomSeed',
    ],
  },
);

/**
 * A plan written before the world grew (sim/regressions.json keeps plans as they shrank): what a
 * field added since means when it is missing — the world of then. A run asked for one credit, its
 * model never stalled, the ticket and refund services were never called, and the runtime let every
 * repeat through (`allow`; a user writing again asked for another credit).
 */
export function withDefaults(plan: SchedulePlan): SchedulePlan {
  const old = plan as unknown as {
    runs: (Omit<RunPlan, 'credits' | 'stalls' | 'onRepeat' | 'againSame'> &
      Partial<Pick<RunPlan, 'credits' | 'stalls' | 'onRepeat' | 'againSame'>>)[];
    behaviours: Partial<SchedulePlan['behaviours']>;
    workflow?: boolean;
    sharedCredit?: boolean;
  };
  return {
    ...plan,
    workflow: old.workflow ?? false,
    sharedCredit: old.sharedCredit ?? false,
    runs: old.runs.map((run) => ({
      ...run,
      credits: run.credits ?? 1,
      stalls: run.stalls ?? false,
      onRepeat: run.onRepeat ?? 'allow',
      againSame: run.againSame ?? false,
    })),
    behaviours: {
      issue_credit: old.behaviours.issue_credit ?? [],
      send_email: old.behaviours.send_email ?? [],
      open_ticket: old.behaviours.open_ticket ?? [],
      issue_refund: old.behaviours.issue_refund ?? [],
    },
  };
}
