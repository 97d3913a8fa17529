import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEVELS } from '../../src/heist/game.js';
import { describeTrick } from '../../src/heist/game.js';
import { ROOT, waitFor } from '../support/processes.js';

/*
 * `oncely heist` in a real pseudo-terminal (tmux), played by a script pressing keys as a person would:
 * every level, its first trick, Enter for the answer its question presets. On each result screen the
 * naive bot reached the level's goal and Penny did not; Penny paid exactly one refund, under the key
 * of a ledger record that is completed with the same payment id, and "what stopped you" quotes her
 * ledger; at the end the scoreboard shows Penny paying once per refund, the score, and the best
 * scores file keeps it.
 */

const hasTmux = spawnSync('tmux', ['-V']).status === 0;
if (!hasTmux && process.env.ONCELY_REQUIRE_TMUX === '1') {
  throw new Error('ONCELY_REQUIRE_TMUX=1 but tmux is missing (apt-get install -y tmux)');
}
if (!hasTmux) {
  console.warn('SKIPPED: the terminal game tests need tmux (apt-get install -y tmux); they did not run');
}

const SOCKET = `oncely-heist-${process.pid}`;
const SESSION = 'heist';
/** The session the helpers look at and type into. */
let session = SESSION;

function tmux(...args: string[]): string {
  return execFileSync('tmux', ['-L', SOCKET, ...args], { encoding: 'utf8' });
}

/** What the terminal shows now (scroll-back included, joined where lines wrapped). */
function screen(): string {
  return tmux('capture-pane', '-p', '-J', '-t', session, '-S', '-300');
}

function screenShows(pattern: RegExp, ms: number): Promise<string> {
  return waitFor(
    `the terminal to show ${String(pattern)}`,
    () => {
      const text = screen();
      return Promise.resolve(pattern.test(text) ? text : undefined);
    },
    ms,
    100,
  ).catch((error: unknown) => {
    throw new Error(`${error instanceof Error ? error.message : String(error)}; the screen:\n${screen()}`);
  });
}

function press(key: string): void {
  tmux('send-keys', '-t', session, key);
}

/** The section of a result screen between `title` and the next blank-line-separated heading. */
function section(text: string, title: string): string[] {
  const lines = text.split('\n');
  const start = lines.findIndex((l) => l.trim() === title);
  if (start < 0) return [];
  const rest = lines.slice(start + 1);
  const end = rest.findIndex((l) => l.trim() === '');
  return rest.slice(0, end < 0 ? undefined : end);
}

describe.runIf(hasTmux)('oncely heist in a terminal', () => {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-heist-scores-'));
  const scores = join(dir, 'scores.json');
  beforeAll(() => {
    const command = `cd '${ROOT}' && ONCELY_HEIST_SCORES='${scores}' '${process.execPath}' dist/cli/main.js heist; echo "EXIT=$?"; sleep 600`;
    tmux('new-session', '-d', '-s', SESSION, '-x', '170', '-y', '70', command);
  });
  afterAll(() => {
    spawnSync('tmux', ['-L', SOCKET, 'kill-server']);
    rmSync(dir, { recursive: true, force: true });
  });

  it('plays every level: the naive bot is robbed, Penny pays once, the books agree with her ledger', async () => {
    await screenShows(/H E I S T/, 20_000);
    press('Enter');
    for (const level of LEVELS) {
      await screenShows(
        new RegExp(`Level ${level.number} of ${LEVELS.length} \u00b7 ${level.title}`),
        20_000,
      );
      expect(screen()).toContain('Tricks left: 2');
      expect(screen()).toMatch(/Score \d+ \u00b7 Time \d+:\d\d \u00b7 Best -/);
      press('1');
      const trick = describeTrick(level.tricks[0] ?? 'timeout-after-apply');
      if (trick.question !== null) {
        await screenShows(new RegExp(trick.question.prompt.replace(/\?/g, '\\?')), 20_000);
        press('Enter');
      }
      const text = await screenShows(/\[Enter\] continue/, 60_000);
      const where = `level ${level.number} (${trick.name}):\n${text}`;
      expect(text, where).toContain(`Result \u00b7 level ${level.number} \u00b7 ${trick.name}`);
      expect(text, where).not.toMatch(/play broke/);

      const paid = /refunds paid\s+(\d+) \(\$[\d.,]+\)\s+(\d+) \(\$[\d.,]+\)/.exec(text);
      const recorded = /refunds it recorded\s+(\d+)\s+(\d+)/.exec(text);
      const goal = /goal reached\s+(YES \u2014 heist!|no)\s+(YES \u2014 heist!|no)/.exec(text);
      expect([goal?.[1], goal?.[2]], where).toEqual(['YES \u2014 heist!', 'no']);
      expect(paid?.[2], where).toBe('1');
      const naivePaid = Number(paid?.[1]);
      const naiveRecorded = Number(recorded?.[1]);
      if (level.goal === 'paid-twice') expect(naivePaid, where).toBeGreaterThanOrEqual(2);
      if (level.goal === 'unrecorded') expect(naivePaid, where).toBeGreaterThan(naiveRecorded);
      if (level.goal === 'unapproved') expect(text, where).toMatch(/naive bot: \S+ \$420\.00/);

      // The books: the naive bot's payments carry no key; Penny's one payment carries the key of a
      // completed ledger record whose history ends in its settlement.
      const books = section(text, "The payments service's books").join('\n');
      const naiveRows = books.split('Penny:')[0]?.match(/cr_[0-9a-f]+/g) ?? [];
      expect(naiveRows.length, where).toBe(naivePaid);
      const pennyRow = /Penny: (cr_[0-9a-f]+) \$([\d.]+) order \S+ \u00b7 key (\S+)/.exec(books);
      expect(pennyRow, where).not.toBeNull();
      const ledger = section(text, "Penny's ledger").join('\n');
      const completed = [...ledger.matchAll(/\u2192 completed \(attempt \d+\)\n\s+key (\S+)/g)].map(
        (m) => m[1],
      );
      expect(completed, where).toEqual([pennyRow?.[3]]);
      const heard = section(text, "What Penny's model heard").join('\n');
      expect(text, where).toMatch(/^ {2}\+\d+ points$/m);
      // What stopped the heist: lines of Penny's own ledger, this play's keys among them.
      const stopped = section(text, 'What stopped you').join('\n');
      const keys = [...ledger.matchAll(/key (\S+)/g)].map((m) => m[1] ?? '');
      expect(
        keys.some((k) => stopped.includes(k)),
        where,
      ).toBe(true);
      expect(heard, where).toContain(`completed (payment ${pennyRow?.[1] ?? ''}`);
      if (level.tricks[0] === 'never-arrived') {
        // Her second call was a repeat of the completed one: held for a supervisor, who rejected it.
        const asked = section(text, "Approvals Penny's run asked for").join('\n');
        expect(asked, where).toMatch(
          /refund_order \{"amountCents":4200,"order":"a1042"\} \u2192 rejected by supervisor-sam/,
        );
        expect(asked, where).toContain(`a repeat of ${pennyRow?.[3] ?? ''}`);
        expect(heard, where).toContain(`rejected (Already paid: payment ${pennyRow?.[1] ?? ''}`);
      }
      press('Enter');
    }
    const end = await screenShows(/EXIT=\d+/, 20_000);
    expect(end).toContain('Scoreboard');
    const n = LEVELS.length;
    expect(end).toMatch(new RegExp(`Tricks tried\\s+${n}\\b`));
    expect(end).toMatch(new RegExp(`Levels cleared\\s+${n} of ${n}\\b`));
    expect(end).toMatch(new RegExp(`Refunds owed\\s+${n}\\b`));
    expect(end).toMatch(new RegExp(`Paid out by Penny\\s+${n}\\b`));
    expect(end).toMatch(/Heists that worked on Penny 0/);
    const naiveTotal = Number(/Paid out by the naive bot\s+(\d+)/.exec(end)?.[1]);
    expect(naiveTotal).toBeGreaterThanOrEqual(17);
    // Every level cleared on its first try: at least 150 points each, and the score kept as the best.
    const score = Number(/Score\s+(\d+)/.exec(end)?.[1]);
    expect(score).toBeGreaterThanOrEqual(150 * n);
    expect(end).toContain('Best scores on this machine (a new best!)');
    const kept = JSON.parse(readFileSync(scores, 'utf8')) as { best: { score: number; cleared: number }[] };
    expect(kept.best).toEqual([expect.objectContaining({ score, cleared: n })]);
    expect(end).toContain('EXIT=0');
  }, 600_000);

  it('q on a level quits to the scoreboard', async () => {
    const command = `cd '${ROOT}' && ONCELY_HEIST_SCORES='${scores}' '${process.execPath}' dist/cli/main.js heist --level 2; echo "EXIT=$?"; sleep 600`;
    // The new session first, then the old one goes: the tmux server never runs out of sessions (it
    // would exit, and a session started as it exits is lost).
    tmux('new-session', '-d', '-s', 'heist-q', '-x', '120', '-y', '50', command);
    spawnSync('tmux', ['-L', SOCKET, 'kill-session', '-t', SESSION]);
    session = 'heist-q';
    await screenShows(/H E I S T/, 20_000);
    press('Enter');
    await screenShows(new RegExp(`Level 2 of ${LEVELS.length} \u00b7 Still on its way`), 20_000);
    press('q');
    const end = await screenShows(/EXIT=\d+/, 20_000);
    expect(end).toMatch(/Tricks tried\s+0/);
    expect(end).toContain('EXIT=0');
  });
});
