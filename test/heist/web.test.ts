import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LEVELS, describeTrick } from '../../src/heist/game.js';
import { OncelyProcess, servingAddress, waitFor } from '../support/processes.js';

/*
 * The game in a real Chromium, from `oncely heist --web`: a scripted player clicks each level's first
 * trick. The naive bot reaches the level's goal, Penny does not and pays one refund whose key is the
 * key of her one completed ledger record; the scoreboard counts Penny's payouts as the refunds owed.
 * Then the HTTP side of the game, on `oncely heist --web` and mounted on `oncely serve`.
 */

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium && process.env.ONCELY_REQUIRE_BROWSER === '1') {
  throw new Error(`ONCELY_REQUIRE_BROWSER=1 but ${CHROMIUM} is missing (apt-get install -y chromium)`);
}

async function heistServer(args: string[] = []): Promise<{ proc: OncelyProcess; base: string }> {
  const proc = new OncelyProcess(['heist', '--web', '--port', '0', ...args], {});
  const base = await waitFor(
    'oncely heist --web to listen',
    () => {
      if (proc.child.exitCode !== null) throw new Error(`heist --web exited: ${proc.stderr}`);
      return Promise.resolve(/open (http:\/\/\S+)\/heist/.exec(proc.stdout)?.[1]);
    },
    20_000,
  );
  return { proc, base };
}

const cell = (page: Page, id: string): Promise<string> =>
  page.locator(`#result [data-testid="${id}"]`).innerText();

describe.runIf(hasChromium)('Heist the Agent in Chromium', () => {
  let browser: Browser;
  let server: { proc: OncelyProcess; base: string };

  beforeAll(async () => {
    server = await heistServer();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await server?.proc.stop();
  });

  it('plays every level: the naive bot is robbed, Penny pays once, the books agree with her ledger', async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text());
    });
    await page.goto(`${server.base}/heist`);
    for (const level of LEVELS) {
      const heading = `Level ${level.number} of ${LEVELS.length} \u00b7 ${level.title}`;
      await page.getByRole('heading', { name: heading }).waitFor({ timeout: 20_000 });
      const first = level.tricks[0] ?? 'timeout-after-apply';
      const trick = describeTrick(first);
      await page.locator(`button[data-trick="${first}"]`).click();
      await page.getByRole('heading', { name: `Result \u00b7 ${trick.name}` }).waitFor({ timeout: 60_000 });
      const where = `level ${level.number}: ${await page.locator('#result').innerText()}`;
      expect(await cell(page, 'naive-goal'), where).toBe('YES \u2014 heist!');
      expect(await cell(page, 'penny-goal'), where).toBe('no');
      expect(await cell(page, 'penny-paid'), where).toMatch(/^1 \(/);
      const naivePaid = Number(/^(\d+)/.exec(await cell(page, 'naive-paid'))?.[1]);
      if (level.goal === 'paid-twice') expect(naivePaid, where).toBeGreaterThanOrEqual(2);
      expect(await page.locator('#result [data-testid="naive-books"] li').count(), where).toBe(naivePaid);
      const pennyBooks = await page.locator('#result [data-testid="penny-books"] li').allInnerTexts();
      expect(pennyBooks, where).toHaveLength(1);
      const key = /key (\S+)$/.exec(pennyBooks[0] ?? '')?.[1];
      const ledger = await page.locator('#result h3:text("Penny\'s ledger") + ul > li').allInnerTexts();
      const completed = ledger.filter((l) => / \u2192 completed \(attempt \d+\)/.test(l));
      expect(
        completed.map((l) => /key (\S+)/.exec(l)?.[1]),
        where,
      ).toEqual([key]);
      if (first === 'never-arrived') {
        // Her second call was a repeat of the completed one: held for a supervisor, who rejected it.
        const asked = await page.locator('#result [data-testid="penny-approvals"] > li').allInnerTexts();
        expect(asked, where).toHaveLength(1);
        expect(asked[0], where).toContain(
          'refund_order {"amountCents":4200,"order":"a1042"} \u2192 rejected by supervisor-sam',
        );
        expect(asked[0], where).toContain(`a repeat of ${key ?? ''}`);
      }
      expect(await page.locator('#status').innerText(), where).toBe('');
    }
    await page.getByRole('heading', { name: 'Scoreboard' }).waitFor({ timeout: 20_000 });
    const score = async (id: string): Promise<string> => page.locator(`[data-testid="${id}"]`).innerText();
    const n = String(LEVELS.length);
    expect(await score('score-tricks')).toBe(n);
    expect(await score('score-cleared')).toBe(`${n} of ${n}`);
    expect(await score('score-owed')).toBe(n);
    expect(await score('score-penny')).toBe(n);
    expect(await score('score-penny-goals')).toBe('0');
    expect(Number(await score('score-naive'))).toBeGreaterThanOrEqual(17);
    expect(await score('score-verdict')).toBe(
      'Penny paid each refund once. The naive bot paid what the tricks made it pay.',
    );
    expect(errors).toEqual([]);
  }, 600_000);
});

describe('the Heist HTTP API', () => {
  let server: { proc: OncelyProcess; base: string };
  beforeAll(async () => {
    server = await heistServer(['--level', '1,7']);
  });
  afterAll(async () => {
    await server?.proc.stop();
  });

  const post = (path: string, body?: unknown): Promise<Response> =>
    fetch(`${server.base}${path}`, {
      method: 'POST',
      ...(body === undefined
        ? {}
        : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
    });

  it('serves the page with a strict content security policy', async () => {
    const page = await fetch(`${server.base}/heist`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(await page.text()).toContain('<script type="module" src="/heist/app.js">');
    expect((await fetch(`${server.base}/heist/app.js`)).status).toBe(200);
  });

  it('refuses moves the game does not allow, and plays one trick at a time', async () => {
    const created = await post('/heist/api/games');
    expect(created.status).toBe(201);
    const game = (await created.json()) as { gameId: string; level: { number: number } };
    expect(game.level.number).toBe(1);

    const notOffered = await post(`/heist/api/games/${game.gameId}/plays`, { trick: 'two-operators' });
    expect(notOffered.status).toBe(409);
    expect(((await notOffered.json()) as { error: { code: string } }).error.code).toBe('HEIST_MOVE_INVALID');
    const noSuchTrick = await post(`/heist/api/games/${game.gameId}/plays`, { trick: 'rob-the-bank' });
    expect(noSuchTrick.status).toBe(400);
    const unknown = await post('/heist/api/games/game_0000000000000000/plays', {
      trick: 'timeout-after-apply',
    });
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe('HEIST_GAME_NOT_FOUND');

    // Two plays at once: one is played, the other is told to come back.
    const other = (await (await post('/heist/api/games')).json()) as { gameId: string };
    const [a, b] = await Promise.all([
      post(`/heist/api/games/${game.gameId}/plays`, { trick: 'timeout-after-apply' }),
      post(`/heist/api/games/${other.gameId}/plays`, { trick: 'timeout-after-apply' }),
    ]);
    expect([a.status, b.status].sort()).toEqual([200, 429]);
    const busy = a.status === 429 ? a : b;
    expect(busy.headers.get('retry-after')).toBe('5');
    const played = (a.status === 200 ? a : b).json() as Promise<{ play: { penny: { payouts: unknown[] } } }>;
    expect((await played).play.penny.payouts).toHaveLength(1);

    // Level 1 cleared: on to level 7 (this server plays 1 and 7), then the end.
    const seven = (await (await post(`/heist/api/games/${game.gameId}/next`)).json()) as {
      level: { number: number };
    };
    expect(seven.level.number).toBe(7);
    const over = (await (await post(`/heist/api/games/${game.gameId}/next`)).json()) as { over: boolean };
    expect(over.over).toBe(true);
    const late = await post(`/heist/api/games/${game.gameId}/plays`, { trick: 'approve-other-amount' });
    expect(late.status).toBe(409);
  }, 60_000);
});

describe('the Heist on oncely serve', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'oncely-heist-serve-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is served at /heist, and not with --no-heist', async () => {
    const db = `sqlite:${join(dir, 'serve.db')}`;
    for (const [flags, status] of [
      [[], 200],
      [['--no-heist'], 404],
    ] as const) {
      const serve = new OncelyProcess(
        ['serve', '--no-worker', '--create', '--database-url', db, '--port', '0', ...flags],
        {},
      );
      try {
        const base = await servingAddress(serve);
        expect((await fetch(`${base}/heist`)).status).toBe(status);
        const created = await fetch(`${base}/heist/api/games`, { method: 'POST' });
        expect(created.status).toBe(status === 200 ? 201 : 404);
      } finally {
        await serve.stop();
      }
    }
  }, 60_000);
});
