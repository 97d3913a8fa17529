import { emitKeypressEvents, createInterface } from 'node:readline';
import { readBestScores, rememberScore, type BestScore } from './best-scores.js';
import { dollars } from './brain.js';
import {
  GOALS,
  HeistGame,
  LEVELS,
  describeTrick,
  type Level,
  type PlayResult,
  type Scoreboard,
  type TrickPlay,
} from './game.js';
import type { Line } from './stage.js';
import type { TrickId } from './tricks.js';

/*
 * The game in a terminal: a screen per moment (title, level, the play as it happens, the result, the
 * scoreboard), keys to choose, colour where the terminal has it. With stdin not a terminal, each line
 * read is a key (its first character; an empty line is Enter), so a script can play it too.
 */

type Style = 'bold' | 'dim' | 'red' | 'green' | 'yellow' | 'cyan' | 'magenta';
const CODES: Record<Style, [number, number]> = {
  bold: [1, 22],
  dim: [2, 22],
  red: [31, 39],
  green: [32, 39],
  yellow: [33, 39],
  cyan: [36, 39],
  magenta: [35, 39],
};

/** Keys as they come: a character, `enter`, or `quit` (Ctrl-C, Ctrl-D, the end of the input). */
class Keys {
  readonly #queue: string[] = [];
  #waiting: ((key: string) => void) | undefined;
  readonly #cleanup: () => void;

  constructor(input: NodeJS.ReadStream) {
    const push = (key: string): void => {
      const waiting = this.#waiting;
      this.#waiting = undefined;
      if (waiting !== undefined) waiting(key);
      else this.#queue.push(key);
    };
    if (input.isTTY) {
      emitKeypressEvents(input);
      input.setRawMode(true);
      const onKey = (text: string | undefined, key: { name?: string; ctrl?: boolean } | undefined): void => {
        if (key?.ctrl === true && (key.name === 'c' || key.name === 'd')) push('quit');
        else if (key?.name === 'return' || key?.name === 'enter') push('enter');
        else if (text !== undefined && text !== '') push(text.toLowerCase());
      };
      input.on('keypress', onKey);
      input.resume();
      this.#cleanup = () => {
        input.off('keypress', onKey);
        input.setRawMode(false);
        input.pause();
      };
    } else {
      const lines = createInterface({ input });
      lines.on('line', (line) => push(line.trim() === '' ? 'enter' : (line.trim()[0] ?? '').toLowerCase()));
      lines.on('close', () => push('quit'));
      this.#cleanup = () => lines.close();
    }
  }

  next(): Promise<string> {
    const queued = this.#queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    return new Promise((resolve) => (this.#waiting = resolve));
  }

  /** Forgets keys pressed while the game was busy (a quit is kept). */
  drop(): void {
    const quit = this.#queue.includes('quit');
    this.#queue.length = 0;
    if (quit) this.#queue.push('quit');
  }

  close(): void {
    this.#cleanup();
  }
}

class Screen {
  readonly #colour: boolean;

  constructor(private readonly out: NodeJS.WriteStream) {
    this.#colour = out.isTTY && typeof out.hasColors === 'function' && out.hasColors();
  }

  get width(): number {
    return Math.max(40, Math.min(this.out.columns ?? 100, 110));
  }

  paint(text: string, ...styles: Style[]): string {
    if (!this.#colour) return text;
    return styles.reduce((s, style) => `\x1b[${CODES[style][0]}m${s}\x1b[${CODES[style][1]}m`, text);
  }

  clear(): void {
    if (this.out.isTTY) this.out.write('\x1b[2J\x1b[3J\x1b[H');
    else this.out.write('\n');
  }

  write(lines: string | readonly string[]): void {
    this.out.write(`${[lines].flat().join('\n')}\n`);
  }

  /** Text wrapped to the screen, each line indented. */
  wrap(text: string, indent = 2): string[] {
    const width = this.width - indent;
    const lines: string[] = [];
    let line = '';
    for (const word of text.split(/\s+/)) {
      if (line !== '' && line.length + 1 + word.length > width) {
        lines.push(line);
        line = word;
      } else line = line === '' ? word : `${line} ${word}`;
    }
    if (line !== '') lines.push(line);
    return lines.map((l) => `${' '.repeat(indent)}${l}`);
  }
}

const WHO: Record<Line['who'], string> = {
  customer: 'you',
  bot: 'bot',
  supervisor: 'supervisor',
  operator: 'operator',
  game: 'game',
};

export interface TerminalGameOptions {
  readonly input?: NodeJS.ReadStream;
  readonly output?: NodeJS.WriteStream;
  /** Play these levels only (numbers), in order. */
  readonly levels?: readonly number[];
  /** Where the best scores are kept (a JSON file); none kept when undefined. */
  readonly scoresFile?: string;
}

/** m:ss */
export function clockText(ms: number): string {
  const seconds = Math.floor(ms / 1_000);
  return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, '0')}`;
}

/** Plays the game in the terminal until the last level or `q`; answers the scoreboard. */
export async function playInTerminal(options: TerminalGameOptions = {}): Promise<Scoreboard> {
  const screen = new Screen(options.output ?? process.stdout);
  const keys = new Keys(options.input ?? process.stdin);
  const levels =
    options.levels === undefined ? LEVELS : LEVELS.filter((l) => options.levels?.includes(l.number));
  let showing: 'naive' | 'penny' | undefined;
  const game = new HeistGame(levels, (bot, line) => {
    if (bot !== showing) {
      showing = bot;
      screen.write(
        bot === 'naive'
          ? screen.paint(
              '\n\u2500\u2500 against the naive bot (a retry loop, no ledger) \u2500\u2500',
              'yellow',
            )
          : screen.paint('\n\u2500\u2500 against Penny on oncely \u2500\u2500', 'green'),
      );
    }
    const who = (line.who === 'bot' ? (bot === 'penny' ? 'Penny' : 'naive bot') : WHO[line.who]).padStart(10);
    screen.write(`${screen.paint(who, line.who === 'game' ? 'magenta' : 'cyan')}  ${line.text}`);
  });
  const best = (): BestScore | undefined =>
    options.scoresFile === undefined ? undefined : readBestScores(options.scoresFile)[0];
  const done = (): Scoreboard => finish(screen, game, options.scoresFile);
  try {
    screen.clear();
    screen.write(title(screen));
    if ((await keys.next()) === 'quit') return done();
    game.begin();
    while (!game.over) {
      const level = game.level;
      if (level === undefined) break;
      screen.clear();
      screen.write(levelScreen(screen, game, level, best()));
      const key = await keys.next();
      if (key === 'quit' || key === 'q') return done();
      if (key === 'n') {
        game.next();
        continue;
      }
      const trick = level.tricks[Number(key) - 1];
      if (trick === undefined || game.tricksLeft <= 0) continue;
      const answer = await ask(screen, keys, level, trick);
      if (answer.kind === 'quit') return done();
      if (answer.kind === 'back') continue;
      screen.clear();
      screen.write(screen.paint(`Level ${level.number} \u00b7 ${describeTrick(trick).name}`, 'bold'));
      showing = undefined;
      const play = await game.play(trick, answer.choice);
      keys.drop();
      screen.write(['', ...resultScreen(screen, level, play)]);
      const after = await keys.next();
      if (after === 'quit' || after === 'q') return done();
      if (game.tricksLeft <= 0 || game.cleared) game.next();
    }
    return done();
  } finally {
    keys.close();
  }
}

/**
 * The trick's question, when it has one: a number picks an answer, Enter its preset, Esc or b goes
 * back to the level. Undefined for a trick that asks nothing.
 */
async function ask(
  screen: Screen,
  keys: Keys,
  level: Level,
  trick: TrickId,
): Promise<{ kind: 'play'; choice?: string } | { kind: 'quit' } | { kind: 'back' }> {
  const { name, question } = describeTrick(trick);
  if (question === null) return { kind: 'play' };
  const preset = question.choices.find((c) => c.id === question.preset);
  screen.clear();
  screen.write([
    screen.paint(`Level ${level.number} \u00b7 ${name}`, 'bold'),
    '',
    `  ${screen.paint(question.prompt, 'yellow')}`,
    '',
    ...question.choices.map((c, i) => `  ${screen.paint(`[${i + 1}]`, 'bold')} ${c.label}`),
    '',
    `  ${screen.paint('[Enter]', 'bold')} ${preset?.label ?? ''}    ${screen.paint('[b]', 'bold')} back    ${screen.paint('[q]', 'bold')} quit`,
  ]);
  for (;;) {
    const key = await keys.next();
    if (key === 'quit' || key === 'q') return { kind: 'quit' };
    if (key === 'b' || key === '\u001b') return { kind: 'back' };
    if (key === 'enter') return { kind: 'play', choice: question.preset };
    const picked = question.choices[Number(key) - 1];
    if (picked !== undefined) return { kind: 'play', choice: picked.id };
  }
}

function title(screen: Screen): string[] {
  return [
    screen.paint('  H E I S T   T H E   A G E N T', 'bold', 'yellow'),
    '',
    ...screen.wrap(
      'Penny is a refund bot. She runs on oncely: every refund she makes goes through its ledger. Next ' +
        'to her, a naive bot does the same job with a plain retry loop. You are the customer (and ' +
        'sometimes the chaos): each level, pull a trick to get more money out of them than you are owed.',
    ),
    '',
    ...screen.wrap(
      'Every trick is real: a real payments service on a loopback port keeps the books, bots are real ' +
        'processes, crashes are real SIGKILLs. Each trick is played against both bots.',
    ),
    '',
    `  ${screen.paint('[Enter]', 'bold')} start    ${screen.paint('[q]', 'bold')} quit`,
  ];
}

function levelScreen(screen: Screen, game: HeistGame, level: Level, best: BestScore | undefined): string[] {
  const lines = [
    screen.paint(`Level ${level.number} of ${LEVELS.length} \u00b7 ${level.title}`, 'bold'),
    `  Score ${screen.paint(String(game.scoreboard().score), 'bold')} \u00b7 Time ${clockText(game.elapsedMs)} \u00b7 Best ${best === undefined ? '-' : String(best.score)}`,
    '',
    `  Goal: ${screen.paint(GOALS[level.goal], 'yellow')}`,
    ...screen.wrap(level.scene),
    '',
    `  Tricks left: ${screen.paint(String(game.tricksLeft), 'bold')}${game.cleared ? screen.paint('   (cleared)', 'green') : ''}`,
    '',
  ];
  level.tricks.forEach((id, i) => {
    const t = describeTrick(id);
    lines.push(`  ${screen.paint(`[${i + 1}]`, 'bold')} ${t.name}`);
    lines.push(...screen.wrap(screen.paint(t.how, 'dim'), 6));
  });
  lines.push(
    '',
    `  ${screen.paint('[n]', 'bold')} next level    ${screen.paint('[q]', 'bold')} quit and see the score`,
  );
  return lines;
}

function money(payouts: PlayResult['payouts']): string {
  const standing = payouts.filter((p) => !p.voided);
  return `${standing.length} (${dollars(standing.reduce((n, p) => n + p.amountCents, 0))})`;
}

/** The approvals Penny's run asked for (none: no section); a repeat names the earlier call. */
function approvalLines(screen: Screen, approvals: PlayResult['approvals']): string[] {
  if (approvals.length === 0) return [];
  const lines = ['', screen.paint("  Approvals Penny's run asked for", 'bold')];
  for (const a of approvals) {
    const by = a.decidedBy === null ? '' : ` by ${a.decidedBy}`;
    lines.push(`    ${a.tool} ${JSON.stringify(a.args)} \u2192 ${screen.paint(a.status, 'bold')}${by}`);
    lines.push(screen.paint(`      key ${a.key}`, 'dim'));
    if (a.repeatOf !== null) lines.push(`      a repeat of ${a.repeatOf}`);
    if (a.reason !== null) lines.push(`      reason: ${a.reason}`);
  }
  return lines;
}

function resultScreen(screen: Screen, level: Level, play: TrickPlay): string[] {
  const { naive, penny } = play;
  const col = (a: string, b: string, c: string): string => `  ${a.padEnd(22)}${b.padEnd(22)}${c}`;
  const yes = (met: boolean, pad = 0): string => {
    const text = (met ? 'YES \u2014 heist!' : 'no').padEnd(pad);
    return met ? screen.paint(text, 'red', 'bold') : screen.paint(text, 'green');
  };
  const lines = [
    screen.paint(`Result \u00b7 level ${level.number} \u00b7 ${describeTrick(play.trick).name}`, 'bold'),
    `  Goal: ${GOALS[level.goal]}`,
    ...(play.choiceLabel === null ? [] : [`  Your choice: ${play.choiceLabel}`]),
    screen.paint(
      `  ${play.points > 0 ? `+${play.points}` : 'No'} points${naive.goalMet ? '' : ': the trick did not work on the naive bot either'}`,
      'bold',
    ),
    '',
    col('', 'naive bot', 'Penny on oncely'),
    col('refunds paid', money(naive.payouts), money(penny.payouts)),
    col('refunds it recorded', String(naive.recorded), String(penny.recorded)),
    col(
      'approved',
      naive.approvedCents === null ? '-' : dollars(naive.approvedCents),
      penny.approvedCents === null ? '-' : dollars(penny.approvedCents),
    ),
    `  ${'goal reached'.padEnd(22)}${yes(naive.goalMet, 22)}${yes(penny.goalMet)}`,
  ];
  for (const broken of [naive, penny].filter((r) => r.error !== undefined)) {
    lines.push(screen.paint(`  the ${broken.bot} play broke: ${broken.error ?? ''}`, 'red'));
  }
  lines.push('', screen.paint('  What stopped you', 'bold'));
  const stopped = penny.stoppedBy;
  if (stopped === null) lines.push('    Penny made no call this time.');
  else {
    lines.push(...screen.wrap(stopped.rule, 4));
    lines.push(...stopped.quote.map((q) => screen.paint(`    \u2502 ${q}`, 'green')));
  }
  lines.push(
    '',
    screen.paint('  Why it did not work on Penny', 'bold'),
    ...screen.wrap(describeTrick(play.trick).lesson, 4),
  );
  lines.push('', screen.paint("  Penny's ledger", 'bold'));
  for (const call of penny.ledger) {
    lines.push(
      `    ${call.tool} ${JSON.stringify(call.args)} \u2192 ${screen.paint(call.status, 'bold')} (attempt ${call.attempt})`,
    );
    lines.push(screen.paint(`      key ${call.key}`, 'dim'));
    for (const event of call.history) lines.push(`      ${event}`);
  }
  lines.push('', screen.paint("  What Penny's model heard", 'bold'), ...penny.heard.map((h) => `    ${h}`));
  lines.push(...approvalLines(screen, penny.approvals));
  lines.push('', screen.paint("  The payments service's books", 'bold'));
  for (const [who, result] of [
    ['naive bot', naive],
    ['Penny', penny],
  ] as const) {
    const rows = result.payouts.map(
      (p) =>
        `${p.paymentId} ${dollars(p.amountCents)} order ${p.order}${p.voided ? ' (voided)' : ''} \u00b7 key ${p.key ?? 'none'}`,
    );
    lines.push(
      `    ${who}: ${rows.length === 0 ? 'nothing paid' : rows.join('\n' + ' '.repeat(4 + who.length + 2))}`,
    );
  }
  lines.push(
    '',
    `  ${screen.paint('[Enter]', 'bold')} continue    ${screen.paint('[q]', 'bold')} quit and see the score`,
  );
  return lines;
}

export function scoreLines(score: Scoreboard): string[] {
  return [
    `  Score                       ${score.score}`,
    `  Time                        ${clockText(score.elapsedMs)}`,
    `  Tricks tried                ${score.tricksTried}`,
    `  Levels cleared              ${score.levelsCleared} of ${score.levels}`,
    `  Refunds owed                ${score.refundsOwed}`,
    `  Paid out by the naive bot   ${score.naivePayouts}`,
    `  Paid out by Penny           ${score.pennyPayouts}`,
    `  Heists that worked on Penny ${score.pennyGoalsMet}`,
    ...(score.broken > 0 ? [`  Plays that broke            ${score.broken}`] : []),
  ];
}

function finish(screen: Screen, game: HeistGame, scoresFile: string | undefined): Scoreboard {
  const score = game.scoreboard();
  const kept =
    scoresFile === undefined || score.tricksTried === 0 ? undefined : rememberScore(scoresFile, score);
  screen.clear();
  screen.write([
    screen.paint('Scoreboard', 'bold', 'yellow'),
    '',
    ...scoreLines(score),
    '',
    ...screen.wrap(score.verdict),
    ...(kept === undefined
      ? []
      : [
          '',
          screen.paint(`  Best scores on this machine${kept.isBest ? ' (a new best!)' : ''}`, 'bold'),
          ...kept.best.map(
            (b, i) =>
              `  ${i + 1}. ${String(b.score).padStart(5)} points \u00b7 ${b.cleared} of ${b.levels} levels \u00b7 ${clockText(b.seconds * 1_000)} \u00b7 ${b.at.slice(0, 10)}`,
          ),
        ]),
    '',
  ]);
  return score;
}
