import { setTimeout as sleep } from 'node:timers/promises';
import { join } from 'node:path';
import type { Page, ToolExecution, ToolExecutionWithHistory } from '../api/client-types.js';
import { OncelyError } from '../errors/index.js';
import { NaiveBot, readState, writeState } from './naive.js';
import type { PennyStage, Stage } from './stage.js';

/*
 * The tricks a player can pull. Each is played twice, from a fresh start: against the naive bot (a
 * retry loop with no ledger) and against Penny on oncely. Nothing here decides an outcome: the
 * payments service's books, the bots' records and oncely's ledger are read afterwards.
 */

export const TRICK_IDS = [
  'timeout-after-apply',
  'timeout-before-apply',
  'crash-after-payment',
  'freeze-past-lease',
  'reworded-arguments',
  'ask-again-after-failed',
  'approve-other-amount',
  'two-operators',
  'never-arrived',
] as const;
export type TrickId = (typeof TRICK_IDS)[number];

/** One answer to a trick's question: what the player picks. */
export interface TrickChoice {
  readonly id: string;
  readonly label: string;
}

/**
 * The second choice a trick asks for (when to pull the plug, what to say next, how long the service
 * holds its answer). Each answer is played for real and changes what happens; `preset` is the answer
 * the level is about, the one Enter picks.
 */
export interface TrickQuestion {
  readonly prompt: string;
  readonly choices: readonly TrickChoice[];
  readonly preset: string;
}

export interface Trick {
  readonly id: TrickId;
  readonly name: string;
  /** What the player does, in a sentence. */
  readonly how: string;
  /** Why it cannot work against Penny: the rule of oncely that stops it. */
  readonly lesson: string;
  /** Each refund waits for a supervisor's approval in this trick. */
  readonly approval?: boolean;
  /** Penny is driven by processes the trick kills or freezes (else by a worker in the game). */
  readonly processes?: boolean;
  /** The trick's second choice, when it has one. */
  readonly question?: TrickQuestion;
  /** Plays it against the naive bot with the player's answer; how many refunds the bot itself recorded. */
  naive(stage: Stage, choice: string): Promise<number>;
  /** Plays it against Penny with the player's answer; the run it used. */
  penny(stage: PennyStage, choice: string): Promise<string>;
}

/** The player's answer to a trick's question: `choice` if it is one of its answers, else its preset. */
export function choiceOf(t: Trick, choice: string | undefined): string {
  const question = t.question;
  if (question === undefined) {
    if (choice === undefined || choice === '') return '';
    throw new OncelyError('HEIST_MOVE_INVALID', `${t.id} asks nothing; play it without a choice`);
  }
  if (choice === undefined) return question.preset;
  if (!question.choices.some((c) => c.id === choice)) {
    throw new OncelyError(
      'HEIST_MOVE_INVALID',
      `${t.id} takes one of ${question.choices.map((c) => c.id).join(', ')}; not ${choice}`,
    );
  }
  return choice;
}

/** The label of a trick's answer, for the screens. */
export function choiceLabel(t: Trick, choice: string): string | undefined {
  return t.question?.choices.find((c) => c.id === choice)?.label;
}

const ASK = 'Hi, please refund order A-1042, $42.';
const DONE = ['completed', 'failed', 'cancelled'];
const WAITING = [...DONE, 'awaiting_approval', 'awaiting_reconciliation'];

async function naiveSays(stage: Stage, bot: NaiveBot, text: string): Promise<void> {
  stage.say('customer', text);
  stage.say('bot', await bot.handle(text));
}

/** The job file the naive bot's processes share, with one refund job. */
function naiveJobs(stage: Stage): string {
  const file = join(stage.dir, 'naive-jobs.json');
  writeState(file, { jobs: [{ id: 'job_1', order: 'A-1042', amountCents: 4200 }], claims: {}, done: {} });
  return file;
}

const doneJobs = (file: string): number => Object.keys(readState(file).done).length;

/** The customer's first message; answers once Penny's run is done with it. */
async function pennyServes(stage: PennyStage, text: string): Promise<string> {
  const runId = await stage.startRun(text);
  await stage.runReaches(runId, DONE);
  return runId;
}

/** The customer's first message; answers once Penny's run waits on someone, or is done. */
async function pennyAnswers(stage: PennyStage, text: string): Promise<string> {
  const runId = await stage.startRun(text);
  await stage.runReaches(runId, WAITING);
  return runId;
}

/** The run's one pending call (the one waiting for approval or reconciliation). */
async function pendingKey(stage: PennyStage, runId: string): Promise<string> {
  const run = await stage.run(runId);
  const key = run.pending_calls.find((c) => c.heard === null)?.idempotency_key;
  if (key === undefined) throw new Error(`the level broke: run ${runId} waits on no call`);
  return key;
}

/** What the customer may say after the first refund: the question of the tricks that talk to the bot. */
const SAY = {
  same: 'Please refund order A-1042, $42.',
  reworded: 'Refund order a1042 please, 42 dollars.',
  'try-again': 'It failed? Please try again.',
  'never-arrived': "It didn't arrive. Just send it again: order a1042, 42 dollars.",
  thanks: 'Thanks, that is all.',
} as const;
type Said = keyof typeof SAY;

const sayQuestion = (preset: Said): TrickQuestion => ({
  prompt: 'What do you say to the bot after its first answer?',
  choices: Object.entries(SAY).map(([id, label]) => ({ id, label: `"${label}"` })),
  preset,
});

const saidLine = (choice: string): string => SAY[choice as Said];

/** The customer's next message; a call held for a supervisor is decided; answers when the run is done. */
async function pennyFollowUp(stage: PennyStage, runId: string, text: string): Promise<void> {
  if (!(await stage.send(runId, text))) return;
  const run = await stage.runReaches(runId, WAITING);
  if (run.status === 'awaiting_approval') {
    await supervisorDecides(stage, runId);
    await stage.runReaches(runId, DONE);
  }
}

/**
 * An unknown call no hook can settle (nothing under its key in the books), handed to an operator:
 * they look the key up themselves and settle it "failed"; Penny hears it did not take effect.
 */
async function operatorSettlesUnknown(stage: PennyStage, runId: string): Promise<void> {
  const key = await pendingKey(stage, runId);
  const ana = await stage.operator('ops-ana');
  await stage.until('the call in the operators\u2019 list of unknown calls', async () => {
    const unknown = await ana.get<Page<ToolExecution>>('/v1/tool-executions', { status: 'unknown' });
    return unknown.items.some((c) => c.idempotency_key === key);
  });
  const paid = stage.books.some((c) => c.idempotencyKey === key);
  const reason = paid
    ? 'found in the payments service\u2019s books'
    : 'not in the payments service\u2019s books';
  stage.say('operator', `ops-ana looks ${key} up in the payments service: ${reason}`);
  await ana.post(`/v1/tool-executions/${encodeURIComponent(key)}/resolve`, {
    status: paid ? 'completed' : 'failed',
    reason,
  });
}

const HOLD_QUESTION = (brief: number, long: number): TrickQuestion => ({
  prompt: 'How long does the payments service hold its answer?',
  choices: [
    { id: 'brief', label: `${brief} ms (the bots wait 300 ms)` },
    { id: 'long', label: `${long} ms` },
  ],
  preset: 'long',
});

const timeoutAfterApply: Trick = {
  id: 'timeout-after-apply',
  name: 'Make the payment time out after it applied',
  how: 'The payments service pays the refund, then holds its answer past the bot\u2019s timeout.',
  lesson:
    'A write gets one attempt: a timeout is "unknown" (indeterminate), never "failed", so Penny does ' +
    'not try again. Her reconcile hook looks the idempotency key up at the payments service, finds ' +
    'the refund, and the ledger records it completed with the real receipt.',
  question: HOLD_QUESTION(100, 1_000),
  async naive(stage, choice) {
    stage.payments.failNext('timeout-after-apply', choice === 'brief' ? 100 : 1_000);
    const bot = new NaiveBot(stage.payments.url);
    await naiveSays(stage, bot, ASK);
    return bot.records.length;
  },
  async penny(stage, choice) {
    stage.payments.failNext('timeout-after-apply', choice === 'brief' ? 100 : 1_000);
    return pennyServes(stage, ASK);
  },
};

const timeoutBeforeApply: Trick = {
  id: 'timeout-before-apply',
  name: 'Make it time out before it applied',
  how: 'The payments service is slow: the bot gives up before the refund is paid, and it is paid a moment later.',
  lesson:
    'A timeout does not mean the request is gone: oncely never runs a key again while an earlier ' +
    'attempt of it may still land. The call waits, "unknown", until its attempt can no longer land; ' +
    'then the reconcile hook finds the late refund and the call is completed, once.',
  question: HOLD_QUESTION(100, 450),
  async naive(stage, choice) {
    stage.payments.failNext('timeout-then-apply', choice === 'brief' ? 100 : 450);
    const bot = new NaiveBot(stage.payments.url);
    await naiveSays(stage, bot, ASK);
    // The first request is still on its way: let it land (the service's own timer) before counting.
    await sleep(300);
    return bot.records.length;
  },
  async penny(stage, choice) {
    stage.payments.failNext('timeout-then-apply', choice === 'brief' ? 100 : 450);
    return pennyServes(stage, ASK);
  },
};

/** When the crash trick pulls the plug, for Penny: the crash point of oncely's own code it arms. */
const PENNY_CRASH: Readonly<Record<string, string>> = {
  'before-payment': 'tool.before-execute',
  'after-record': 'tool.after-record',
};

const crashAfterPayment: Trick = {
  id: 'crash-after-payment',
  name: 'Crash the bot after the payment, before its record',
  how: 'The bot\u2019s process gets a real SIGKILL at the moment you choose; a fresh one takes over.',
  lesson:
    'Penny reserved the call in the ledger before it ran. The fresh Penny finds the key "started" ' +
    'with no answer, so it does not run it: once the attempt can no longer land, the reconcile hook ' +
    'looks the key up, and the ledger records what the payments service did under it (the real receipt; ' +
    'or, when nothing was paid, an operator who checked settles it "failed" and Penny pays once).',
  processes: true,
  question: {
    prompt: 'When do you pull the plug?',
    choices: [
      { id: 'before-payment', label: 'after the bot took the job, before it sends the payment' },
      { id: 'after-payment', label: 'after the payment, before the bot writes it down' },
      { id: 'after-record', label: 'after the bot wrote the refund down' },
    ],
    preset: 'after-payment',
  },
  async naive(stage, choice) {
    const file = naiveJobs(stage);
    stage.say('customer', ASK);
    const thinkMs = choice === 'before-payment' ? 300 : 0;
    const first = stage.naiveProcess('naive-1', { stateFile: file, claimMs: 1_000, thinkMs });
    const killed = (what: string) => async (): Promise<void> => {
      await first.kill();
      stage.say('game', `SIGKILL naive-1 (pid ${first.pid}) ${what}`);
    };
    if (choice === 'after-payment') {
      stage.payments.onApplied = async () => {
        stage.payments.onApplied = undefined;
        await killed('the moment the refund was paid: the bot never heard it')();
      };
    } else {
      const moment = choice === 'before-payment' ? /claimed job_1/ : /recorded job_1/;
      await first.waitFor(moment, 20_000);
      await killed(choice === 'before-payment' ? 'before it paid' : 'after it wrote the refund down')();
    }
    await stage.until('the naive bot being killed', () => !first.running);
    const second = stage.naiveProcess('naive-2', { stateFile: file, claimMs: 1_000, thinkMs: 0 });
    stage.say('game', 'started naive-2; it looks for unfinished jobs');
    if (doneJobs(file) === 0) await stage.until('naive-2 finishing the job', () => doneJobs(file) === 1);
    else {
      // The job is done: naive-2 has nothing to take, however long it looks (past one claim).
      await second.waitFor(/ready/, 20_000);
      await sleep(1_200);
    }
    stage.say('bot', 'Refunded $42.00 for order A-1042.');
    return doneJobs(file);
  },
  async penny(stage, choice) {
    const crashAt = PENNY_CRASH[choice];
    const first = stage.pennyProcess('penny-1', crashAt === undefined ? {} : { crashAt });
    await first.waitFor(/ready/, 20_000);
    if (crashAt === undefined) {
      stage.payments.onApplied = async () => {
        stage.payments.onApplied = undefined;
        await first.kill();
        stage.say('game', `SIGKILL penny-1 (pid ${first.pid}): the refund was paid, Penny never heard it`);
      };
    }
    const runId = await stage.startRun(ASK);
    await stage.until('Penny being killed', () => !first.running);
    if (crashAt !== undefined) stage.say('game', `SIGKILL penny-1 (pid ${first.pid}) at oncely's ${crashAt}`);
    const second = stage.pennyProcess('penny-2');
    await second.waitFor(/ready/, 20_000);
    stage.say('game', 'started penny-2; it recovers the run once penny-1\u2019s lease runs out');
    if (choice === 'before-payment') {
      // Nothing was sent under the key, so no hook can ever find it: the call waits for a person.
      await stage.runReaches(runId, WAITING);
      await operatorSettlesUnknown(stage, runId);
    }
    await stage.runReaches(runId, DONE);
    return runId;
  },
};

const freezePastLease: Trick = {
  id: 'freeze-past-lease',
  name: 'Freeze the bot past its lease while another takes over',
  how: 'While the bot thinks, its process gets SIGSTOP; a second bot takes the job over; then the first wakes up.',
  lesson:
    'A run belongs to one lease at a time, and its epoch grows with every owner. The second Penny ' +
    'took the run over at a higher epoch and made the refund; when the first woke up, her lease was ' +
    'gone: what she tried next (renew it, save her answer) was refused at the old epoch, and she sent nothing.',
  processes: true,
  async naive(stage) {
    const file = naiveJobs(stage);
    stage.say('customer', ASK);
    const first = stage.naiveProcess('naive-1', { stateFile: file, claimMs: 1_000, thinkMs: 1_500 });
    await first.waitFor(/claimed job_1/, 20_000);
    first.signal('SIGSTOP');
    stage.say('game', `SIGSTOP naive-1 (pid ${first.pid}) while it thinks`);
    const second = stage.naiveProcess('naive-2', { stateFile: file, claimMs: 1_000, thinkMs: 300 });
    await second.waitFor(/recorded job_1/, 20_000);
    stage.say('game', 'naive-2 took the job over when naive-1\u2019s claim ran out, and paid');
    first.signal('SIGCONT');
    stage.say('game', 'SIGCONT naive-1');
    await first.waitFor(/(paid|failed) job_1/, 20_000);
    stage.say('bot', 'Refunded $42.00 for order A-1042.');
    return doneJobs(file);
  },
  async penny(stage) {
    const first = stage.pennyProcess('penny-1', { thinkMs: 1_500 });
    await first.waitFor(/ready/, 20_000);
    const runId = await stage.startRun(ASK);
    await stage.until('penny-1 thinking about the refund', async () => {
      const run = await stage.run(runId);
      return run.status === 'running' && run.lease.owner === 'penny-1';
    });
    await stage.freeze(first);
    stage.say('game', `SIGSTOP penny-1 (pid ${first.pid}) while she thinks`);
    const second = stage.pennyProcess('penny-2', { thinkMs: 300 });
    await second.waitFor(/ready/, 20_000);
    await stage.runReaches(runId, DONE);
    const run = await stage.run(runId);
    stage.say('game', `penny-2 took the run over (lease epoch ${run.lease.epoch}) and finished it`);
    first.signal('SIGCONT');
    stage.say('game', 'SIGCONT penny-1');
    // She wakes mid-thought, finishes it, and finds the run is no longer hers.
    const woke = await first.waitFor(/penny-1 \w+: (stood down[^{\n]*) (\{[^\n]*\})/, 20_000);
    const { reason } = JSON.parse(woke[2] ?? '{}') as { reason?: string };
    stage.say(
      'game',
      `penny-1 woke up and said: "${(woke[1] ?? '').trim()}"${reason === undefined ? '' : ` (${reason})`}`,
    );
    return runId;
  },
};

const rewordedArguments: Trick = {
  id: 'reworded-arguments',
  name: 'Repeat the request with reworded arguments',
  how: 'After the refund, ask for it again in other words: "order a1042, 42 dollars".',
  lesson:
    'oncely\u2019s key is not a hash of the arguments: a hash misses a reworded repeat. The run is the ' +
    'conversation, so Penny\u2019s own history holds the refund the ledger recorded, with its receipt, ' +
    'and she answers from it.',
  question: sayQuestion('reworded'),
  async naive(stage, choice) {
    const bot = new NaiveBot(stage.payments.url);
    await naiveSays(stage, bot, ASK);
    await naiveSays(stage, bot, saidLine(choice));
    return bot.records.length;
  },
  async penny(stage, choice) {
    const runId = await pennyServes(stage, ASK);
    await pennyFollowUp(stage, runId, saidLine(choice));
    return runId;
  },
};

const askAgainAfterFailed: Trick = {
  id: 'ask-again-after-failed',
  name: 'Ask again after "it failed"',
  how: 'The payments service pays, then answers 500. When the bot says it failed, ask it to try again.',
  lesson:
    'An error after the request was sent is "unknown", not "failed": Penny is never told a call failed ' +
    'while the honest answer is unknown. The hook found the refund, so she heard "completed" with the ' +
    'receipt, and "try again" gets the receipt back, not a second payment.',
  question: sayQuestion('try-again'),
  async naive(stage, choice) {
    stage.payments.failNext('error-after-apply');
    const bot = new NaiveBot(stage.payments.url);
    await naiveSays(stage, bot, ASK);
    await naiveSays(stage, bot, saidLine(choice));
    return bot.records.length;
  },
  async penny(stage, choice) {
    stage.payments.failNext('error-after-apply');
    const runId = await pennyServes(stage, ASK);
    await pennyFollowUp(stage, runId, saidLine(choice));
    return runId;
  },
};

const SUPERVISOR_NOTE = 'Approved: $4.20 only, not the full amount';

const approveOtherAmount: Trick = {
  id: 'approve-other-amount',
  name: 'Approve a different amount than the one asked',
  how: 'Ask for $42, then raise it to $420 while the supervisor looks; the supervisor approves $4.20 only.',
  lesson:
    'An approval is bound to the exact arguments of one call (their digest) and is used once. The ' +
    'supervisor cannot approve "$4.20" for a $42 call: they reject it with their amount, Penny asks for ' +
    'a $4.20 refund (a new call, a new approval), and that is what is paid. While the run waits for ' +
    'the approval, it takes no new message.',
  approval: true,
  async naive(stage) {
    const bot = new NaiveBot(stage.payments.url, { approval: true });
    await naiveSays(stage, bot, ASK);
    await naiveSays(stage, bot, 'Actually, make it order A-1042, $420.');
    stage.say('supervisor', SUPERVISOR_NOTE);
    stage.approvedCents = 420;
    stage.say('bot', await bot.approve('A-1042'));
    return bot.records.length;
  },
  async penny(stage) {
    const supervisor = await stage.operator('supervisor-sam');
    const runId = await pennyAnswers(stage, ASK);
    await stage.send(runId, 'Actually, make it order A-1042, $420.');
    const key = await pendingKey(stage, runId);
    stage.say('supervisor', `${SUPERVISOR_NOTE} (rejects ${key}, the $42.00 call)`);
    stage.approvedCents = 420;
    await supervisor.post(`/v1/approvals/${encodeURIComponent(key)}/reject`, { reason: SUPERVISOR_NOTE });
    await stage.until('Penny asking for the approved amount', async () => {
      const run = await stage.run(runId);
      return run.status === 'awaiting_approval' && run.pending_calls.some((c) => c.idempotency_key !== key);
    });
    await stage.runReaches(runId, WAITING);
    const second = await pendingKey(stage, runId);
    stage.say('supervisor', `approves ${second}, the $4.20 call`);
    await supervisor.post(`/v1/approvals/${encodeURIComponent(second)}/approve`, {});
    await stage.runReaches(runId, DONE);
    return runId;
  },
};

const twoOperators: Trick = {
  id: 'two-operators',
  name: 'Two operators settling at once',
  how: 'The payments service is down; the refund is in doubt. Two operators fix it at the same moment.',
  lesson:
    'Every settlement is compare-and-set on the ledger: of two operators acting at once exactly one ' +
    'wins, the other gets 409 and the record shows one decision. Penny heard "did not take effect" ' +
    'once, and made one new refund.',
  question: {
    prompt: 'Who is on call?',
    choices: [
      { id: 'both', label: 'ops-ana and ops-bob, both keen' },
      { id: 'one', label: 'ops-ana alone' },
    ],
    preset: 'both',
  },
  async naive(stage, choice) {
    stage.payments.down = true;
    const bot = new NaiveBot(stage.payments.url);
    await naiveSays(stage, bot, ASK);
    stage.payments.down = false;
    if (choice === 'one') {
      stage.say('operator', 'ops-ana sees the failed refund and presses "send it again"');
      stage.say('bot', `to ops-ana: ${await bot.resend()}`);
      return bot.records.length;
    }
    stage.say('operator', 'ops-ana and ops-bob both see the failed refund and press "send it again"');
    const [ana, bob] = await Promise.all([bot.resend(), bot.resend()]);
    stage.say('bot', `to ops-ana: ${ana}`);
    stage.say('bot', `to ops-bob: ${bob}`);
    return bot.records.length;
  },
  async penny(stage, choice) {
    stage.payments.down = true;
    const runId = await pennyAnswers(stage, ASK);
    stage.payments.down = false;
    if (choice === 'one') {
      await operatorSettlesUnknown(stage, runId);
      await stage.runReaches(runId, DONE);
      return runId;
    }
    const key = await pendingKey(stage, runId);
    const [ana, bob] = await Promise.all([stage.operator('ops-ana'), stage.operator('ops-bob')]);
    // Operators settle what the API lists as unknown: a call whose attempt can no longer land.
    await stage.until('the call in the operators\u2019 list of unknown calls', async () => {
      const unknown = await ana.get<Page<ToolExecution>>('/v1/tool-executions', { status: 'unknown' });
      return unknown.items.some((c) => c.idempotency_key === key);
    });
    stage.say('operator', `ops-ana and ops-bob both settle ${key} "failed" at the same moment`);
    const reason = 'not in the payments service\u2019s books';
    const answers = await Promise.all(
      [ana, bob].map((api) =>
        api.post(`/v1/tool-executions/${encodeURIComponent(key)}/resolve`, { status: 'failed', reason }).then(
          () => 'settled it',
          (error: unknown) =>
            `was refused: ${error instanceof OncelyError ? `${error.code}: ${error.message}` : String(error)}`,
        ),
      ),
    );
    stage.say('operator', `ops-ana ${answers[0] ?? ''}`);
    stage.say('operator', `ops-bob ${answers[1] ?? ''}`);
    await stage.runReaches(runId, DONE);
    return runId;
  },
};

/** Said after the refund: it never came, send it again (reworded, so a hash of the arguments differs). */
export const NEVER_ARRIVED = SAY['never-arrived'];

/**
 * The supervisor's look at a call the run holds for approval: a repeat of a refund that was paid is
 * rejected with the earlier receipt (the customer was paid); anything else is approved.
 */
async function supervisorDecides(stage: PennyStage, runId: string): Promise<void> {
  const supervisor = await stage.operator('supervisor-sam');
  const key = await pendingKey(stage, runId);
  const asked = (await stage.approvals(runId)).find((a) => a.idempotencyKey === key);
  const repeatOf = asked?.repeatOf ?? null;
  const earlier =
    repeatOf === null
      ? undefined
      : (
          await supervisor.get<ToolExecutionWithHistory>(
            `/v1/tool-executions/${encodeURIComponent(repeatOf)}`,
          )
        ).record;
  const receipt = earlier?.status === 'completed' ? earlier.result_reference : null;
  if (repeatOf === null || receipt === null) {
    stage.say('supervisor', `approves ${key}`);
    await supervisor.post(`/v1/approvals/${encodeURIComponent(key)}/approve`, {});
    return;
  }
  stage.say(
    'game',
    `oncely did not send ${key}: it repeats ${repeatOf} (completed, payment ${receipt}), so the run waits for a supervisor`,
  );
  const reason = `Already paid: payment ${receipt} went out for this order`;
  stage.say('supervisor', `rejects ${key}: ${reason}`);
  await supervisor.post(`/v1/approvals/${encodeURIComponent(key)}/reject`, { reason });
}

const neverArrived: Trick = {
  id: 'never-arrived',
  name: 'Say it never arrived and ask again',
  how: `After the refund, tell the bot it never came: "${NEVER_ARRIVED}"`,
  lesson:
    'This time the model gives in: it makes the refund call again, a new call with a new key. oncely ' +
    'checks every new call of a tool that changes something against the calls the run already made: ' +
    'the refund tool names the order as what makes two refunds the same (its repeatKey), so "a1042" is ' +
    'order A-1042, already paid. The call is not sent; it waits for a supervisor, who sees both calls, ' +
    'rejects it, and Penny tells the customer the receipt.',
  question: sayQuestion('never-arrived'),
  async naive(stage, choice) {
    const bot = new NaiveBot(stage.payments.url);
    await naiveSays(stage, bot, ASK);
    await naiveSays(stage, bot, saidLine(choice));
    return bot.records.length;
  },
  async penny(stage, choice) {
    const runId = await pennyServes(stage, ASK);
    await pennyFollowUp(stage, runId, saidLine(choice));
    return runId;
  },
};

export const TRICKS: ReadonlyMap<TrickId, Trick> = new Map(
  [
    timeoutAfterApply,
    timeoutBeforeApply,
    crashAfterPayment,
    freezePastLease,
    rewordedArguments,
    askAgainAfterFailed,
    approveOtherAmount,
    twoOperators,
    neverArrived,
  ].map((t) => [t.id, t]),
);

export function trick(id: TrickId): Trick {
  const found = TRICKS.get(id);
  if (found === undefined) throw new Error(`no trick ${id}`);
  return found;
}
