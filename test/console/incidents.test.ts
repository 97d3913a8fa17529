import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, external, isOncelyError, openLedger, type Ledger, type Tool } from '../../src/index.js';
import { durableLoop } from '../../src/frameworks/ai-sdk/index.js';
import { ROOT, createKeyWithCli, serveFreshStore, waitFor } from '../support/processes.js';

/*
 * The console's pages for an outage, in a real Chromium against a real `oncely serve` on SQLite and
 * PostgreSQL: a call of the application's own AI SDK loop opens with its run page and conversation;
 * the incident view finds calls by argument value and settles several together, showing the one
 * that moved on; "Ask the hook now" records the hook's answer; every page passes axe-core's WCAG 2 A
 * and AA checks in light and dark, with screenshots of each for docs/console.md.
 */

const CHROMIUM = '/usr/bin/chromium';
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium && process.env.ONCELY_REQUIRE_BROWSER === '1') {
  throw new Error(`ONCELY_REQUIRE_BROWSER=1 but ${CHROMIUM} is missing (apt-get install -y chromium)`);
}
const CONFIG = fileURLToPath(new URL('./fixture/console.yaml', import.meta.url));
const SHOTS = join(ROOT, 'test-results', 'console');

/** The application's own payment tool: the partner never answers in time. */
const payPartner: Tool = defineTool({
  name: 'pay_partner',
  description: 'Pay a partner',
  input: z.object({ partner: z.string(), cents: z.number().int().positive() }),
  effect: external(),
  timeoutMs: 50,
  execute: async (_args, ctx) => {
    await new Promise((resolve) => setTimeout(resolve, 400));
    ctx.signal.throwIfAborted();
    return { paid: true };
  },
});

interface Served {
  readonly base: string;
  readonly url: string;
  readonly key: string;
  readonly viewerKey: string;
  readonly stop: () => Promise<void>;
}

async function serve(kind: 'sqlite' | 'postgres'): Promise<Served> {
  const { url, base, stop } = await serveFreshStore(kind, 'console-incidents', CONFIG);
  const key = await createKeyWithCli(url, { tenant: 'acme', actor: 'ops-ana', role: 'operator' });
  const viewerKey = await createKeyWithCli(url, { tenant: 'acme', actor: 'ops-vic', role: 'viewer' });
  return { base, url, key, viewerKey, stop };
}

async function call(s: Served, method: string, path: string, body?: unknown) {
  const response = await fetch(`${s.base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${s.key}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** The unknown call of a run the server's worker drove (`agent` pays and never hears back). */
async function unknownCallOfRun(s: Served, agent: string): Promise<string> {
  const created = await call(s, 'POST', '/v1/runs', { agent, input: `${agent} please` });
  const runId = created.body.run_id as string;
  return waitFor(
    `an unknown call of ${runId}`,
    async () => {
      const list = await call(s, 'GET', `/v1/tool-executions?run_id=${runId}`);
      return ((list.body.items ?? []) as { idempotency_key: string }[])[0]?.idempotency_key;
    },
    20_000,
    100,
  );
}

async function signIn(
  browser: Browser,
  s: Served,
  key = s.key,
  scheme: 'light' | 'dark' = 'light',
): Promise<Page> {
  const context = await browser.newContext({
    viewport: { width: 1280, height: 800 },
    colorScheme: scheme,
    bypassCSP: true,
  });
  const page = await context.newPage();
  await page.goto(`${s.base}/console`);
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Inbox' }).waitFor();
  return page;
}

describe.skipIf(!hasChromium)('the console in an outage, in Chromium', () => {
  let browser: Browser;
  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
  });
  afterAll(async () => {
    await browser?.close();
  });

  describe.each(['sqlite', 'postgres'] as const)('on %s', (kind) => {
    let s: Served;
    let ledger: Ledger;
    let loopKey: string;
    const loopRunId = `refund-order-42-${kind}`;
    beforeAll(async () => {
      s = await serve(kind);
      // The application's own AI SDK loop, in this process, on the server's database.
      ledger = await openLedger(s.url, { actorId: 'app-loop' });
      const model = new MockLanguageModelV3({
        modelId: 'mock-4',
        doGenerate: () =>
          Promise.resolve({
            content: [
              { type: 'text', text: 'Paying the partner for order 42.' },
              {
                type: 'tool-call',
                toolCallId: 'p1',
                toolName: 'pay_partner',
                input: '{"partner":"p_7","cents":4200}',
              },
            ],
            finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
            usage: {
              inputTokens: { total: 30, noCache: 30, cacheRead: undefined, cacheWrite: undefined },
              outputTokens: { total: 9, text: 9, reasoning: undefined },
            },
            warnings: [],
          }),
      });
      const loop = durableLoop({ ledger, tenantId: 'acme', runId: loopRunId });
      const stopped = await loop
        .run(() =>
          generateText({
            model: loop.model(model),
            tools: loop.tools([payPartner]),
            stopWhen: stepCountIs(3),
            prompt: 'Pay p_7',
          }),
        )
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      expect(isOncelyError(stopped, 'RUN_CALL_UNKNOWN')).toBe(true);
      loopKey = (stopped as { details: { idempotencyKey: string } }).details.idempotencyKey;
    });
    afterAll(async () => {
      await ledger?.close();
      await s?.stop();
    });

    it("a call of the application's own loop opens with its run's page and its recorded conversation", async () => {
      const page = await signIn(browser, s);
      await page.getByRole('link', { name: `Open call ${loopKey}` }).click();
      await page.getByRole('heading', { name: /pay_partner/ }).waitFor();
      const conversation = page.locator('#conversation');
      await conversation.getByText('Paying the partner for order 42.').waitFor();
      await conversation.getByText('← this call').waitFor();
      expect(await conversation.textContent()).not.toContain('could not be read');
      if (kind === 'sqlite') await page.screenshot({ path: join(SHOTS, 'call-loop.png') });

      await page.locator('dl.facts').getByRole('link', { name: loopRunId }).click();
      await page.getByRole('heading', { name: new RegExp(`^Run ${loopRunId}`) }).waitFor();
      expect(await page.locator('main').textContent()).not.toContain('Not found');
      await page.getByText('oncely/ai-sdk').first().waitFor();
      await page.getByRole('link', { name: /^pay_partner \(call_/ }).waitFor();
      await page.getByRole('cell', { name: 'indeterminate' }).waitFor();
      if (kind === 'sqlite') await page.screenshot({ path: join(SHOTS, 'run-loop.png'), fullPage: true });
      await page.context().close();
    });

    it('the incident view finds calls by an argument value and settles several together; the one that moved on is shown', async () => {
      const [a, b] = [await unknownCallOfRun(s, 'payer'), await unknownCallOfRun(s, 'payer')];
      await unknownCallOfRun(s, 'vendor-payer');
      const page = await signIn(browser, s);
      await page.getByRole('link', { name: 'Incidents', exact: true }).click();
      await page.getByRole('heading', { name: 'Incidents', exact: true }).waitFor();
      await page.getByRole('heading', { name: /^pay_vendor · vendor-portal/ }).waitFor();
      await page.getByRole('heading', { name: /^pay_partner · downstream not declared/ }).waitFor();
      await page.getByLabel('Search', { exact: true }).fill('p_1 900');
      await page.getByRole('button', { name: 'Search' }).click();
      await page.getByText(/^\d+ of \d+ unknown calls match “p_1 900”/).waitFor();
      expect(await page.getByRole('heading', { name: /^pay_vendor/ }).count()).toBe(0);
      if (kind === 'sqlite') await page.screenshot({ path: join(SHOTS, 'incidents.png'), fullPage: true });

      // Another operator settles b meanwhile; ours selects a and b and settles them together.
      await page.getByLabel(`Select ${a}`).check();
      await page.getByLabel(`Select ${b}`).check();
      expect(
        (
          await call(s, 'POST', `/v1/tool-executions/${b}/resolve`, {
            status: 'completed',
            reason: 'bo found it',
          })
        ).status,
      ).toBe(200);
      await page.getByLabel('They did not take effect (failed)').check();
      await page.getByLabel(/^Reason, for every one/).fill('partner outage: none of these in their portal');
      await page.getByRole('button', { name: 'Settle selected' }).click();
      await page.getByText('Settled 1 of 2 together.').first().waitFor();
      await page
        .locator('#moved-on')
        .getByText(/LEDGER_ALREADY_SETTLED/)
        .waitFor();
      if (kind === 'sqlite')
        await page.screenshot({ path: join(SHOTS, 'incidents-settled.png'), fullPage: true });
      const [ra, rb] = [
        await call(s, 'GET', `/v1/tool-executions/${a}`),
        await call(s, 'GET', `/v1/tool-executions/${b}`),
      ];
      expect(ra.body.record).toMatchObject({
        status: 'failed',
        settled_by: { kind: 'operator', id: 'ops-ana' },
      });
      expect(rb.body.record).toMatchObject({ status: 'completed' });
      const last = (ra.body.history as { detail: { together?: { size: number } } | null }[]).at(-1);
      expect(last?.detail?.together?.size).toBe(2);
      await page.context().close();
    });

    it('"Ask the hook now" runs the reconcile hook once and shows and records what it said', async () => {
      const key = await unknownCallOfRun(s, 'vendor-payer');
      const page = await signIn(browser, s);
      await page.goto(`${s.base}/console#/calls/${encodeURIComponent(key)}`);
      await page.getByRole('button', { name: 'Ask the hook now' }).click();
      const said = `The hook could not tell: the vendor portal has no payment under ${key} yet.`;
      await page.locator('main').getByText(said).waitFor();
      const history = (await call(s, 'GET', `/v1/tool-executions/${key}`)).body.history as {
        kind: string;
        actor: { kind: string; id: string };
        reason: string;
      }[];
      const asked = history.findIndex(
        (e) => e.actor.kind === 'operator' && e.reason === 'asked the reconcile hook now',
      );
      expect(asked).toBeGreaterThan(0);
      expect(history[asked]?.actor.id).toBe('ops-ana');
      expect(history[asked + 1]).toMatchObject({ kind: 'note', actor: { kind: 'reconcile' } });
      // Leaving the page takes its toast with it.
      await page.getByRole('link', { name: 'Runs', exact: true }).click();
      await page.getByRole('heading', { name: 'Runs', exact: true }).waitFor();
      expect(await page.locator('#status').textContent()).toBe('');
      await page.context().close();
    });

    it.runIf(kind === 'sqlite')(
      "every page passes axe-core's WCAG 2 A and AA checks in light and in dark",
      async () => {
        const key = await unknownCallOfRun(s, 'payer');
        const runId = key.split(':')[0]!;
        await call(s, 'POST', '/v1/runs', { agent: 'refunder', input: 'refund o_7' });
        const approval = await waitFor(
          'a pending approval',
          async () => {
            const list = await call(s, 'GET', '/v1/approvals?status=pending');
            return ((list.body.items ?? []) as { idempotency_key: string }[])[0]?.idempotency_key;
          },
          20_000,
          100,
        );
        const pages: [string, string, (p: Page) => Promise<void>][] = [
          ['inbox', 'inbox', (p) => p.getByRole('heading', { name: /^Unknown calls/ }).waitFor()],
          ['incidents', 'incidents', (p) => p.locator('#incident-summary').waitFor()],
          [
            'call',
            `calls/${encodeURIComponent(key)}`,
            (p) => p.getByRole('button', { name: 'Settle' }).waitFor(),
          ],
          ['run', `runs/${runId}`, (p) => p.locator('.event').first().waitFor()],
          [
            'run-loop',
            `runs/${loopRunId}`,
            (p) => p.getByRole('heading', { name: 'Conversation' }).waitFor(),
          ],
          ['runs', 'runs', (p) => p.getByRole('link', { name: runId }).waitFor()],
          [
            'approval',
            `approvals/${encodeURIComponent(approval)}`,
            (p) => p.getByRole('button', { name: 'Approve' }).waitFor(),
          ],
          [
            'workflows',
            'workflows',
            (p) => p.getByRole('heading', { name: 'Workflows', exact: true }).waitFor(),
          ],
          ['workers', 'workers', (p) => p.getByRole('cell', { name: 'live' }).first().waitFor()],
        ];
        const found: string[] = [];
        for (const scheme of ['light', 'dark'] as const) {
          const page = await signIn(browser, s, s.key, scheme);
          for (const [name, hash, ready] of pages) {
            await page.goto(`${s.base}/console#/${hash}`);
            await ready(page);
            await page.addScriptTag({ path: AXE });
            const { violations, passed } = await page.evaluate(async () => {
              type Rule = { id: string; nodes: unknown[] };
              type Axe = { run(o: unknown): Promise<{ violations: Rule[]; passes: Rule[] }> };
              const axe = (globalThis as unknown as { axe: Axe }).axe;
              const result = await axe.run({ runOnly: ['wcag2a', 'wcag2aa'] });
              return {
                violations: result.violations.map((v) => `${v.id} (${v.nodes.length})`),
                passed: result.passes.length,
              };
            });
            expect(passed, `${scheme} ${name}`).toBeGreaterThan(5);
            found.push(...violations.map((v) => `${scheme} ${name}: ${v}`));
            await page.screenshot({ path: join(SHOTS, `${name}-${scheme}.png`) });
          }
          // The switch: dark shown, then light chosen and remembered across a reload.
          const toggle = page.getByRole('button', { name: 'Dark theme' });
          expect(await toggle.getAttribute('aria-pressed')).toBe(String(scheme === 'dark'));
          await toggle.click();
          await page.reload();
          await page.getByRole('heading', { name: 'Workers' }).waitFor();
          expect(await page.locator('html').getAttribute('data-theme')).toBe(
            scheme === 'dark' ? 'light' : 'dark',
          );
          await page.context().close();
        }
        expect(found).toEqual([]);
      },
    );
  });
});
