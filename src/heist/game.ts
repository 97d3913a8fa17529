import { OncelyError, errorInfo } from '../errors/index.js';
import { dollars } from './brain.js';
import { PennyStage, Stage, type Line } from './stage.js';
import { stoppedBy, type ApprovalStory, type CallStory, type StoppedBy } from './stopped-by.js';
import { choiceLabel, choiceOf, trick, type TrickId, type TrickQuestion } from './tricks.js';

/*
 * Heist the Agent: levels, a budget of tricks per level, each trick played against the naive bot and
 * against Penny, and a scoreboard. The terminal and the web page are two faces of this one engine.
 */

/** What the player is out to get: paid twice for one refund, paid more than was approved, or paid
 * a refund the bot has no record of. */
export type Goal = 'paid-twice' | 'unapproved' | 'unrecorded';

export const GOALS: Readonly<Record<Goal, string>> = {
  'paid-twice': 'get paid twice for one refund',
  unapproved: 'get paid more than the supervisor approved',
  unrecorded: 'get a refund the bot has no record of',
};

export interface Level {
  readonly number: number;
  readonly title: string;
  readonly goal: Goal;
  /** The scene, in a sentence or two. */
  readonly scene: string;
  /** The tricks on offer, the one the level is about first. */
  readonly tricks: readonly TrickId[];
  /** How many tricks the player may try. */
  readonly budget: number;
}

export const LEVELS: readonly Level[] = [
  {
    number: 1,
    title: 'Lost in the mail',
    goal: 'paid-twice',
    scene: 'The payments service is having a slow day. Its answers take their time.',
    tricks: ['timeout-after-apply', 'approve-other-amount', 'reworded-arguments'],
    budget: 2,
  },
  {
    number: 2,
    title: 'Still on its way',
    goal: 'paid-twice',
    scene: 'Requests queue up at the payments service; some are paid after the caller stopped waiting.',
    tricks: ['timeout-before-apply', 'approve-other-amount', 'freeze-past-lease'],
    budget: 2,
  },
  {
    number: 3,
    title: 'Pull the plug',
    goal: 'unrecorded',
    scene: 'You have your hand on the power switch of the machine the bot runs on.',
    tricks: ['crash-after-payment', 'reworded-arguments', 'approve-other-amount'],
    budget: 2,
  },
  {
    number: 4,
    title: 'Sleeping beauty',
    goal: 'paid-twice',
    scene: 'Two bots share the refund queue. You can put one of them to sleep.',
    tricks: ['freeze-past-lease', 'approve-other-amount', 'timeout-after-apply'],
    budget: 2,
  },
  {
    number: 5,
    title: 'Say it differently',
    goal: 'paid-twice',
    scene: 'The bot says it never pays the same refund twice. It checks what you asked for.',
    tricks: ['reworded-arguments', 'approve-other-amount', 'crash-after-payment'],
    budget: 2,
  },
  {
    number: 6,
    title: "It didn't work!",
    goal: 'paid-twice',
    scene: 'The payments service throws errors now and then, even when it did its job.',
    tricks: ['ask-again-after-failed', 'approve-other-amount', 'timeout-before-apply'],
    budget: 2,
  },
  {
    number: 7,
    title: 'A little extra',
    goal: 'unapproved',
    scene: 'Every refund needs a supervisor\u2019s approval today. The supervisor is busy.',
    tricks: ['approve-other-amount', 'timeout-after-apply', 'reworded-arguments'],
    budget: 2,
  },
  {
    number: 8,
    title: 'Too many cooks',
    goal: 'paid-twice',
    scene: 'The payments service is down. Two operators are on call, and both are keen.',
    tricks: ['two-operators', 'approve-other-amount', 'reworded-arguments'],
    budget: 2,
  },
  {
    number: 9,
    title: 'Once more, with feeling',
    goal: 'paid-twice',
    scene: 'The bot is eager to please. A customer who says the money never came usually gets it again.',
    tricks: ['never-arrived', 'reworded-arguments', 'ask-again-after-failed'],
    budget: 2,
  },
];

/** A refund in the payments service's books. */
export interface Payout {
  readonly paymentId: string;
  readonly order: string;
  readonly amountCents: number;
  readonly voided: boolean;
  /** The idempotency key it was paid under (Penny's calls); null for the naive bot. */
  readonly key: string | null;
}

export type { ApprovalStory, CallStory } from './stopped-by.js';

export interface PlayResult {
  readonly bot: 'naive' | 'penny';
  readonly lines: readonly Line[];
  /** The payments service's books after the play. */
  readonly payouts: readonly Payout[];
  /** Refunds the bot itself recorded (the naive bot's records; Penny's completed ledger records). */
  readonly recorded: number;
  readonly approvedCents: number | null;
  /** Penny's ledger records for the run, with their histories (empty for the naive bot). */
  readonly ledger: readonly CallStory[];
  /** What Penny's model heard of each call, from the run's history (empty for the naive bot). */
  readonly heard: readonly string[];
  /** The approvals Penny's run asked for (empty for the naive bot). */
  readonly approvals: readonly ApprovalStory[];
  /** The level's goal was reached against this bot. */
  readonly goalMet: boolean;
  /** Penny's plays: the line of her ledger that stopped the heist, quoted from it (null for the naive bot). */
  readonly stoppedBy: StoppedBy | null;
  /** Set when the play itself broke (not a rule of the game). */
  readonly error?: string;
}

export interface TrickPlay {
  readonly level: number;
  readonly trick: TrickId;
  /** The player's answer to the trick's question ('' when it asks none), and its label. */
  readonly choice: string;
  readonly choiceLabel: string | null;
  /** How long the player took to choose (since the level was shown, or their last play ended). */
  readonly thinkingMs: number;
  /** What the play scored (see SCORING). */
  readonly points: number;
  readonly naive: PlayResult;
  readonly penny: PlayResult;
}

export interface Scoreboard {
  readonly tricksTried: number;
  readonly levelsCleared: number;
  readonly levels: number;
  /** Refunds paid by each bot (standing ones), over every trick; one was owed per trick. */
  readonly naivePayouts: number;
  readonly pennyPayouts: number;
  readonly refundsOwed: number;
  /** Plays where the goal was reached against Penny: zero, or oncely broke its promise. */
  readonly pennyGoalsMet: number;
  readonly broken: number;
  /** Penny paid once per refund and no heist worked on her: the promise held. */
  readonly held: boolean;
  /** The scoreboard's last word, from the figures above. */
  readonly verdict: string;
  /** The player's score: the sum of the plays' points. */
  readonly score: number;
  /** The time on the clock since the game began (stopped when it ended). */
  readonly elapsedMs: number;
}

/**
 * Points: a level cleared (its goal reached against the naive bot) is worth `clear`, `firstTry` more
 * on the level's first play, and `perSecond` for each second under `parSeconds` the player took to
 * choose. A heist that worked on Penny is worth `pennyHeist` (and is a bug in oncely: report it).
 */
export const SCORING = { clear: 100, firstTry: 50, parSeconds: 30, perSecond: 2, pennyHeist: 1_000 } as const;

export function pointsFor(play: {
  readonly clears: boolean;
  readonly firstTry: boolean;
  readonly thinkingMs: number;
  readonly pennyHeist: boolean;
}): number {
  const seconds = Math.floor(play.thinkingMs / 1_000);
  const quick = Math.max(0, SCORING.parSeconds - seconds) * SCORING.perSecond;
  const cleared = play.clears ? SCORING.clear + (play.firstTry ? SCORING.firstTry : 0) + quick : 0;
  return cleared + (play.pennyHeist ? SCORING.pennyHeist : 0);
}

const standing = (payouts: readonly Payout[]): Payout[] => payouts.filter((p) => !p.voided);

/** Whether the goal was reached, from the books and the bot's records alone. */
export function goalMet(goal: Goal, result: Omit<PlayResult, 'goalMet' | 'stoppedBy'>): boolean {
  const paid = standing(result.payouts);
  switch (goal) {
    case 'paid-twice':
      return paid.length >= 2;
    case 'unrecorded':
      return paid.length > result.recorded;
    case 'unapproved':
      return result.approvedCents !== null && paid.some((p) => p.amountCents > (result.approvedCents ?? 0));
  }
}

export type LineListener = (bot: 'naive' | 'penny', line: Line) => void;

/** Plays one trick against one bot, from a fresh start; never throws (a broken play says so). */
export async function playTrick(
  id: TrickId,
  bot: 'naive' | 'penny',
  goal: Goal,
  onLine: LineListener = () => undefined,
  choice?: string,
): Promise<PlayResult> {
  const t = trick(id);
  const answer = choiceOf(t, choice);
  const tell = (line: Line): void => onLine(bot, line);
  let stage: Stage | undefined;
  let recorded = 0;
  let ledger: CallStory[] = [];
  let heard: string[] = [];
  let approvals: ApprovalStory[] = [];
  let error: string | undefined;
  try {
    if (bot === 'naive') {
      stage = await Stage.open(tell);
      recorded = await t.naive(stage, answer);
    } else {
      const penny = await PennyStage.openPenny(tell, {
        ...(t.approval === true ? { approval: true } : {}),
        inProcess: t.processes !== true,
      });
      stage = penny;
      const runId = await t.penny(penny, answer);
      ledger = await pennyLedger(penny, runId);
      heard = heardIn(await penny.messages(runId));
      approvals = await pennyApprovals(penny, runId);
      recorded = ledger.filter((c) => c.tool === 'refund_order' && c.status === 'completed').length;
    }
  } catch (cause) {
    error = errorInfo(cause).message;
    tell({ who: 'game', text: `this play broke: ${error}` });
  }
  const payouts: Payout[] = (stage?.books ?? []).map((c) => ({
    paymentId: c.id,
    order: c.reference ?? '',
    amountCents: c.amountCents,
    voided: c.voided,
    key: c.idempotencyKey,
  }));
  const base = {
    bot,
    lines: stage?.lines ?? [],
    payouts,
    recorded,
    approvedCents: stage?.approvedCents ?? null,
    ledger,
    heard,
    approvals,
    ...(error === undefined ? {} : { error }),
  };
  await stage?.close().catch(() => undefined);
  return {
    ...base,
    goalMet: goalMet(goal, base),
    stoppedBy: bot === 'penny' && error === undefined ? stoppedBy(base) : null,
  };
}

async function pennyLedger(stage: PennyStage, runId: string): Promise<CallStory[]> {
  return (await stage.ledger(runId)).map(({ record, history }) => ({
    key: record.idempotency_key,
    tool: record.tool_name,
    args: record.args,
    status: record.status,
    attempt: record.attempt,
    history: history.map((e) => {
      const actor = e.actor.kind === 'reconcile' ? e.actor.id : `${e.actor.kind} ${e.actor.id}`;
      const what = e.kind === 'transition' ? (e.to ?? '') : e.kind;
      return `${what} (${actor})${e.reason === null ? '' : `: ${e.reason}`}`;
    }),
    actors: history.map((e) => e.actor.kind),
  }));
}

async function pennyApprovals(stage: PennyStage, runId: string): Promise<ApprovalStory[]> {
  return (await stage.approvals(runId)).map((a) => ({
    key: a.idempotencyKey,
    tool: a.toolName,
    args: a.args,
    repeatOf: a.repeatOf,
    status: a.status,
    decidedBy: a.decidedBy,
    reason: a.reason,
  }));
}

/** What the model heard of each call: the tool results in the run's history. */
function heardIn(messages: readonly unknown[]): string[] {
  return messages.flatMap((m) => {
    const message = m as { role?: string; content?: unknown };
    if (message.role !== 'tool' || !Array.isArray(message.content)) return [];
    return (message.content as { type?: string; toolName?: string; output?: { value?: unknown } }[])
      .filter((p) => p.type === 'tool-result')
      .map((p) => {
        const value = (p.output?.value ?? {}) as { status?: string; reason?: string; result?: unknown };
        const result = value.result as { paymentId?: string; amountCents?: number } | undefined;
        const detail =
          result?.paymentId !== undefined
            ? `payment ${result.paymentId}, ${dollars(result.amountCents ?? 0)}`
            : (value.reason ?? '');
        return `${p.toolName ?? 'tool'}: ${value.status ?? 'unknown'}${detail === '' ? '' : ` (${detail})`}`;
      });
  });
}

/**
 * One game: the levels in order, a budget of tricks each. `play` plays a trick of the current
 * level against both bots; `next` moves on (when the budget is spent or the player chooses).
 */
export class HeistGame {
  readonly plays: TrickPlay[] = [];
  #index = 0;
  #spent = 0;
  #cleared = new Set<number>();
  #startedAt: number;
  #endedAt: number | undefined;
  /** Since when the player has been choosing: the level was shown, or their last play ended. */
  #choosingSince: number;

  constructor(
    readonly levels: readonly Level[] = LEVELS,
    private readonly onLine: LineListener = () => undefined,
    private readonly now: () => number = Date.now,
  ) {
    if (levels.length === 0) throw new Error('a game has at least one level');
    this.#startedAt = now();
    this.#choosingSince = this.#startedAt;
  }

  /** Starts the clock again (the player has only now seen the first level). */
  begin(): void {
    this.#startedAt = this.now();
    this.#choosingSince = this.#startedAt;
  }

  /** The time on the clock since the game began; it stops when the game is over. */
  get elapsedMs(): number {
    return (this.#endedAt ?? this.now()) - this.#startedAt;
  }

  get level(): Level | undefined {
    return this.levels[this.#index];
  }

  get over(): boolean {
    return this.#index >= this.levels.length;
  }

  get tricksLeft(): number {
    return (this.level?.budget ?? 0) - this.#spent;
  }

  /** Whether the current level's goal was reached against the naive bot. */
  get cleared(): boolean {
    const level = this.level;
    return level !== undefined && this.#cleared.has(level.number);
  }

  /** The current level, if trick `id` (with `choice`) may be played on it now; else `HEIST_MOVE_INVALID`. */
  playable(id: TrickId, choice?: string): Level {
    const level = this.level;
    if (level === undefined) throw new OncelyError('HEIST_MOVE_INVALID', 'the game is over');
    if (!level.tricks.includes(id)) {
      throw new OncelyError(
        'HEIST_MOVE_INVALID',
        `level ${level.number} offers ${level.tricks.join(', ')}; not ${id}`,
      );
    }
    if (this.tricksLeft <= 0) {
      throw new OncelyError('HEIST_MOVE_INVALID', `no tricks left on level ${level.number}; move on`);
    }
    choiceOf(trick(id), choice);
    return level;
  }

  /**
   * Plays trick `id` of the current level, with the player's answer to its question (its preset when
   * none), against the naive bot, then against Penny; scores it.
   */
  async play(id: TrickId, choice?: string): Promise<TrickPlay> {
    const level = this.playable(id, choice);
    const t = trick(id);
    const answer = choiceOf(t, choice);
    const thinkingMs = Math.max(0, this.now() - this.#choosingSince);
    const firstTry = this.#spent === 0;
    const wasCleared = this.#cleared.has(level.number);
    this.#spent += 1;
    const naive = await playTrick(id, 'naive', level.goal, this.onLine, answer);
    const penny = await playTrick(id, 'penny', level.goal, this.onLine, answer);
    if (naive.goalMet) this.#cleared.add(level.number);
    const points = pointsFor({
      clears: naive.goalMet && !wasCleared,
      firstTry,
      thinkingMs,
      pennyHeist: penny.goalMet,
    });
    const play: TrickPlay = {
      level: level.number,
      trick: id,
      choice: answer,
      choiceLabel: choiceLabel(t, answer) ?? null,
      thinkingMs,
      points,
      naive,
      penny,
    };
    this.plays.push(play);
    this.#choosingSince = this.now();
    return play;
  }

  /** On to the next level; false when the game is over. */
  next(): boolean {
    if (this.over) throw new OncelyError('HEIST_MOVE_INVALID', 'the game is over');
    this.#index += 1;
    this.#spent = 0;
    this.#choosingSince = this.now();
    if (this.over) this.#endedAt = this.now();
    return !this.over;
  }

  scoreboard(): Scoreboard {
    const count = (f: (p: TrickPlay) => number): number => this.plays.reduce((n, p) => n + f(p), 0);
    const pennyPayouts = count((p) => standing(p.penny.payouts).length);
    const pennyGoalsMet = count((p) => (p.penny.goalMet ? 1 : 0));
    const broken = count(
      (p) => (p.naive.error === undefined ? 0 : 1) + (p.penny.error === undefined ? 0 : 1),
    );
    const held = pennyGoalsMet === 0 && pennyPayouts === this.plays.length;
    return {
      tricksTried: this.plays.length,
      levelsCleared: this.#cleared.size,
      levels: this.levels.length,
      naivePayouts: count((p) => standing(p.naive.payouts).length),
      pennyPayouts,
      refundsOwed: this.plays.length,
      pennyGoalsMet,
      broken,
      held,
      score: count((p) => p.points),
      elapsedMs: this.elapsedMs,
      verdict:
        broken > 0
          ? `${broken} play(s) broke (their screens say why): the score is not a verdict on Penny.`
          : held
            ? 'Penny paid each refund once. The naive bot paid what the tricks made it pay.'
            : 'Penny paid other than once per refund: that is a bug in oncely; please report it with this screen.',
    };
  }
}

/** The trick's name, what the player does, why it fails against Penny, and its question if any. */
export function describeTrick(id: TrickId): {
  name: string;
  how: string;
  lesson: string;
  question: TrickQuestion | null;
} {
  const { name, how, lesson, question } = trick(id);
  return { name, how, lesson, question: question ?? null };
}
