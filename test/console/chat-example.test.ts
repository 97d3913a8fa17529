import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';
import { OncelyProcess, ROOT, createKeyWithCli, servingAddress, waitFor } from '../support/processes.js';

/*
 * The chat example (examples/chat) in a real Chromium: its page and backend in front of a real
 * `oncely serve` on SQLite and on PostgreSQL. A customer asks for a refund: Penny's answers stream
 * in word by word, the refund waits for the supervisor's approval in the middle of the chat, then a
 * second message is answered in the same conversation. The payments book holds one refund.
 */

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium && process.env.ONCELY_REQUIRE_BROWSER === '1') {
  throw new Error(`ONCELY_REQUIRE_BROWSER=1 but ${CHROMIUM} is missing (apt-get install -y chromium)`);
}
const CONFIG = join(ROOT, 'examples', 'chat', 'oncely.yaml');
const SERVER = join(ROOT, 'examples', 'chat', 'server.mjs');
const FIRST_ANSWER = 'Done! Your refund of $42.00 is on its way back to your card. Anything else?';

/** The example's backend, as its README starts it; resolves with its address. */
async function chatServer(env: Record<string, string>): Promise<{ base: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [SERVER], {
    env: { ...process.env, ...env, PORT: '0' },
    stdio: 'pipe',
  });
  let out = '';
  child.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  child.stderr?.on('data', (chunk: Buffer) => (out += chunk.toString('utf8')));
  const base = await waitFor(
    'the chat example to listen',
    () => {
      if (child.exitCode !== null) throw new Error(`the chat example exited ${child.exitCode}: ${out}`);
      return Promise.resolve(/chat example on (http:\/\/\S+)/.exec(out)?.[1]);
    },
    20_000,
  );
  return { base, child };
}

describe.runIf(hasChromium).each(['sqlite', 'postgres'] as const)('the chat example on %s', (kind) => {
  let browser: Browser;
  let serve: OncelyProcess;
  let chat: ChildProcess;
  let chatBase: string;
  let book: string;
  let dir: string;
  let drop: () => Promise<void>;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'oncely-chat-'));
    book = join(dir, 'payments.jsonl');
    let url: string;
    if (kind === 'sqlite') {
      const file = tempSqlitePath('chat');
      url = `sqlite:${file.path}`;
      drop = () => Promise.resolve(file.cleanup());
    } else {
      const db = await createTestDatabase('chat');
      url = db.url;
      drop = () => db.drop();
    }
    const migrate = new OncelyProcess(['migrate', '--create', '--database-url', url], {});
    expect((await migrate.exit(30_000)).code, migrate.stderr).toBe(0);
    serve = new OncelyProcess(
      ['serve', '--config', CONFIG, '--database-url', url, '--port', '0', '--poll-ms', '100'],
      { PAYMENTS_BOOK: book },
    );
    const api = await servingAddress(serve);
    const chatKey = await createKeyWithCli(url, { tenant: 'shop', actor: 'chat-web', role: 'operator' });
    const supervisor = await createKeyWithCli(url, { tenant: 'shop', actor: 'sup-sam', role: 'operator' });
    ({ base: chatBase, child: chat } = await chatServer({
      ONCELY_API_URL: api,
      ONCELY_API_KEY: chatKey,
      SUPERVISOR_API_KEY: supervisor,
    }));
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
  });
  afterAll(async () => {
    await browser?.close();
    chat?.kill('SIGTERM');
    await serve?.stop();
    await drop?.();
    rmSync(dir, { recursive: true, force: true });
  });

  it('streams a refund conversation with an approval in the middle, and refunds once', async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(chatBase);
    await page.getByRole('button', { name: 'Send' }).click();

    // The first answer streams in: seen part-written (the cursor on), before it is whole.
    const streaming = page.locator('li.assistant[data-streaming="true"]');
    await streaming.first().waitFor({ timeout: 20_000 });
    const partial = await waitFor(
      'a part-written answer',
      async () => {
        const step = await streaming
          .first()
          .getAttribute('data-step', { timeout: 200 })
          .catch(() => null);
        if (step === null) return undefined;
        const text = await page
          .locator(`li.assistant[data-step="${step}"][data-streaming="true"]`)
          .textContent({ timeout: 200 })
          .catch(() => null);
        const seen = text === null ? undefined : { step, text };
        return seen !== undefined && seen.text.split(' ').length >= 2 ? seen : undefined;
      },
      20_000,
      10,
    );
    const whole: Record<string, string> = {
      '1': 'Sorry to hear that! Let me look up order ord_1001.',
      '2':
        'Order ord_1001 was $42.00, and it qualifies. I am refunding the full amount; a supervisor ' +
        'approves every refund, so this may take a moment.',
    };
    expect(whole[partial.step]?.startsWith(partial.text.trimEnd()), JSON.stringify(partial)).toBe(true);

    // The refund waits for the supervisor; the customer sees why.
    const approve = page.getByRole('button', { name: 'Approve issue_refund' });
    await approve.waitFor({ timeout: 20_000 });
    await expect(page.getByRole('status').textContent()).resolves.toContain('supervisor');
    expect(await page.getByRole('listitem').filter({ hasText: '"amountCents":4200' }).count()).toBe(1);
    // Nothing refunded before the approval.
    expect(existsSync(book) ? readFileSync(book, 'utf8').trim() : '').toBe('');
    await approve.click();

    await page
      .getByText(FIRST_ANSWER)
      .waitFor({ timeout: 20_000 })
      .catch(async (error: unknown) => {
        const shown = await page.locator('body').innerText();
        throw new Error(`${String(error)}\npage:\n${shown}\nserve:\n${serve.stderr.slice(-3000)}`);
      });
    const sendButton = page.getByRole('button', { name: 'Send' });
    await waitFor(
      'the composer to be usable again',
      async () => ((await sendButton.isEnabled()) ? true : undefined),
      20_000,
    );

    // The next message, in the same conversation.
    await page.getByLabel('Your message').fill('Thanks! Was I charged for shipping too?');
    await sendButton.click();
    await page
      .getByText(/free shipping, so the \$42\.00 refund covers everything/)
      .waitFor({ timeout: 20_000 });
    await page.getByText(/Tokens so far: 2414 of a budget of 20000 \(turn 2\)/).waitFor({ timeout: 20_000 });

    expect(await page.locator('#log li.user').allTextContents()).toEqual([
      'Hi! Order ord_1001 arrived broken. Can I get a refund?',
      'Thanks! Was I charged for shipping too?',
    ]);
    expect(await page.locator('#log li.assistant').count()).toBe(4);
    expect(await page.locator('#log li.call').allTextContents()).toEqual([
      'lookup_order: completed',
      'issue_refund: completed',
    ]);
    expect(errors).toEqual([]);

    // The payments service's books: one refund, of the approved amount.
    const refunds = readFileSync(book, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(refunds).toEqual([
      expect.objectContaining({ orderId: 'ord_1001', amountCents: 4200, refundId: 'rf_1' }),
    ]);
    expect(String(refunds[0]!.key)).toMatch(/^chat_[A-Za-z0-9_.-]+:call_[0-9a-f]{16}$/);
    await page.close();
  });
});
