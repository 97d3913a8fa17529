import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createKeyWithCli, serveFreshStore, waitFor } from '../support/processes.js';

/*
 * A scripted first-time operator: signed in, on the console's home, told only "a payment's outcome
 * is unknown; settle it". It follows what the page shows (no addresses typed, no keys known), and
 * the test counts its clicks and times it from the home page to the settled call: at most 3 clicks
 * and 30 s, on SQLite and on PostgreSQL.
 */

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium && process.env.ONCELY_REQUIRE_BROWSER === '1') {
  throw new Error(`ONCELY_REQUIRE_BROWSER=1 but ${CHROMIUM} is missing (apt-get install -y chromium)`);
}
const CONFIG = fileURLToPath(new URL('./fixture/console.yaml', import.meta.url));

describe.skipIf(!hasChromium)('a first-time operator settles an unknown call from the home page', () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
  });
  afterAll(async () => {
    await browser?.close();
  });

  it.each(['sqlite', 'postgres'] as const)('on %s: at most 3 clicks and 30 s', async (kind) => {
    const { url, base, stop } = await serveFreshStore(kind, 'first-operator', CONFIG);
    try {
      const key = await createKeyWithCli(url, { tenant: 'acme', actor: 'ops-new', role: 'operator' });
      const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
      const started = await fetch(`${base}/v1/runs`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ agent: 'payer', input: 'pay p_1' }),
      });
      const runId = ((await started.json()) as { run_id: string }).run_id;
      const unknown = await waitFor(
        'the unknown call',
        async () => {
          const r = await fetch(`${base}/v1/tool-executions?run_id=${runId}`, { headers });
          return ((await r.json()) as { items: { idempotency_key: string }[] }).items[0]?.idempotency_key;
        },
        20_000,
        100,
      );

      const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage();
      await page.goto(`${base}/console`);
      await page.getByLabel('API key').fill(key);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: /^Unknown calls/ }).waitFor();

      // From here the operator is on their own: the clock runs and every click counts.
      let clicks = 0;
      const click = async (locator: ReturnType<typeof page.getByRole>) => {
        clicks++;
        await locator.click();
      };
      const t0 = Date.now();
      await click(page.getByRole('link', { name: /^Open call / }).first());
      await click(page.getByLabel(/did not take effect/));
      await page
        .getByLabel(/^Reason/)
        .first()
        .fill('no payment under this key in the partner portal');
      await click(page.getByRole('button', { name: /^Settle/ }).first());
      await page
        .getByText(/^Settled .* as failed\.$/)
        .first()
        .waitFor({ timeout: 30_000 });
      const seconds = (Date.now() - t0) / 1000;
      console.log(`[first-time operator on ${kind}] ${clicks} clicks, ${seconds.toFixed(2)} s`);
      expect(clicks).toBeLessThanOrEqual(3);
      expect(seconds).toBeLessThanOrEqual(30);

      const record = await fetch(`${base}/v1/tool-executions/${encodeURIComponent(unknown)}`, { headers });
      expect(
        ((await record.json()) as { record: { status: string; settled_by: unknown } }).record,
      ).toMatchObject({
        status: 'failed',
        settled_by: { kind: 'operator', id: 'ops-new' },
      });
      await page.context().close();
    } finally {
      await stop();
    }
  });
});
