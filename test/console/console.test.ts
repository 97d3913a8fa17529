import { existsSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ROOT,
  createKeyWithCli,
  serveFreshStore,
  waitFor,
  type OncelyProcess,
} from '../support/processes.js';

/*
 * The operator console in a real Chromium, against a real `oncely serve` (with its worker) on SQLite
 * and on PostgreSQL: calls made unknown by real runs, found, opened and settled in the browser.
 */

const CHROMIUM = '/usr/bin/chromium';
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const hasChromium = existsSync(CHROMIUM);
if (!hasChromium) {
  if (process.env.ONCELY_REQUIRE_BROWSER === '1') {
    throw new Error(`ONCELY_REQUIRE_BROWSER=1 but ${CHROMIUM} is missing (apt-get install -y chromium)`);
  }
  console.warn(
    `\n*** CONSOLE BROWSER TESTS SKIPPED: ${CHROMIUM} not found (apt-get install -y chromium). ***\n`,
  );
}

const CONFIG = fileURLToPath(new URL('./fixture/console.yaml', import.meta.url));
const SHOTS = join(ROOT, 'test-results', 'console');

interface Served {
  readonly base: string;
  readonly proc: OncelyProcess;
  readonly keys: Record<'ana' | 'bo' | 'viewer' | 'other', string>;
  readonly cleanup: () => Promise<void>;
}

async function serve(kind: 'sqlite' | 'postgres'): Promise<Served> {
  const served = await serveFreshStore(kind, 'console', CONFIG);
  const key = (tenant: string, actor: string, role: string) =>
    createKeyWithCli(served.url, { tenant, actor, role });
  const keys = {
    ana: await key('acme', 'ops-ana', 'operator'),
    bo: await key('acme', 'ops-bo', 'operator'),
    viewer: await key('acme', 'ops-vic', 'viewer'),
    other: await key('globex', 'ops-gus', 'operator'),
  };
  return { base: served.base, proc: served.proc, keys, cleanup: () => served.stop() };
}

async function call(s: Served, method: string, path: string, body?: unknown, key = s.keys.ana) {
  const response = await fetch(`${s.base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

async function startRun(s: Served, agent: string): Promise<string> {
  const created = await call(s, 'POST', '/v1/runs', { agent, input: `${agent} please` });
  expect(created.status).toBe(201);
  return created.body.run_id as string;
}

async function runStatus(s: Served, runId: string): Promise<string> {
  return (await call(s, 'GET', `/v1/runs/${runId}`)).body.status as string;
}

/** The run's unknown call (its payment), once the API lists it. */
async function unknownCallOf(s: Served, runId: string): Promise<string> {
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

/** A page that counts the operator's clicks (the measure of how quickly a call is settled). */
class Operator {
  clicks = 0;
  private constructor(readonly page: Page) {}

  static async signIn(
    browser: Browser,
    base: string,
    key: string,
    width = 1280,
    height = 900,
  ): Promise<Operator> {
    const context = await browser.newContext({ viewport: { width, height } });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => {
      if (m.type() === 'error' && !m.text().includes('status of 4')) errors.push(m.text());
    });
    await page.goto(`${base}/console`);
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Inbox' }).waitFor();
    const op = new Operator(page);
    op.errors = errors;
    return op;
  }

  errors: string[] = [];

  async click(locator: ReturnType<Page['getByRole']>): Promise<void> {
    this.clicks++;
    await locator.click();
  }

  async shot(name: string): Promise<void> {
    await this.page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  }
}

describe.skipIf(!hasChromium)('the operator console in Chromium', () => {
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
    beforeAll(async () => {
      s = await serve(kind);
    });
    afterAll(async () => {
      await s?.cleanup();
    });

    it('an operator finds an unknown call made by a real run, settles it in 3 clicks, and the paused run completes', async () => {
      const runId = await startRun(s, 'payer');
      const key = await unknownCallOf(s, runId);
      await waitFor(
        'the run to pause',
        async () => ((await runStatus(s, runId)) === 'awaiting_reconciliation' ? true : undefined),
        20_000,
        100,
      );

      const ana = await Operator.signIn(browser, s.base, s.keys.ana);
      const row = ana.page.getByRole('link', { name: `Open call ${key}` });
      await row.waitFor({ timeout: 15_000 });
      await expect(
        ana.page.getByRole('heading', { name: /^Unknown calls \(\d+\)$/ }).textContent(),
      ).resolves.toMatch(/\(\d+\)/);
      if (kind === 'sqlite') await ana.shot('inbox');

      // From the inbox: open it, say it did not take effect, give the reason, settle.
      await ana.click(row);
      await ana.page.getByRole('heading', { name: /pay_partner/ }).waitFor();
      expect(await ana.page.locator('pre.json').first().textContent()).toContain('"partner": "p_1"');
      await ana.page.getByText('asks pay_partner').first().waitFor();
      if (kind === 'sqlite') await ana.shot('call');
      await ana.click(ana.page.getByLabel('It did not take effect (failed)'));
      await ana.page
        .getByLabel('Reason (required; kept in the history)')
        .fill('no payment under this key in the partner portal');
      await ana.click(ana.page.getByRole('button', { name: 'Settle' }));
      await ana.page.getByText(`Settled ${key} as failed.`).first().waitFor();
      expect(ana.clicks).toBeLessThanOrEqual(4);
      expect(ana.clicks).toBe(3);
      if (kind === 'sqlite') await ana.shot('call-settled');

      // The ledger says so, with the console's operator as the actor, and the run goes on to its end.
      const record = await call(s, 'GET', `/v1/tool-executions/${key}`);
      expect(record.body.record).toMatchObject({
        status: 'failed',
        settled_by: { kind: 'operator', id: 'ops-ana' },
      });
      const history = record.body.history as {
        to: string | null;
        reason: string | null;
        actor: { id: string };
      }[];
      expect(history.at(-1)).toMatchObject({ to: 'failed', actor: { id: 'ops-ana' } });
      await waitFor(
        'the paused run to complete',
        async () => ((await runStatus(s, runId)) === 'completed' ? true : undefined),
        20_000,
        100,
      );
      expect(ana.errors).toEqual([]);
      await ana.page.context().close();
    });

    it('a viewer sees no action, and a forged request is refused', async () => {
      const runId = await startRun(s, 'payer');
      const key = await unknownCallOf(s, runId);
      const vic = await Operator.signIn(browser, s.base, s.keys.viewer);
      await vic.page.goto(`${s.base}/console#/calls/${encodeURIComponent(key)}`);
      await vic.page.getByRole('heading', { name: /pay_partner/ }).waitFor();
      await vic.page.getByText('Your key is a viewer: you can look, not act.').waitFor();
      expect(await vic.page.getByRole('button', { name: 'Settle' }).count()).toBe(0);
      expect(await vic.page.locator('form#resolve-form').count()).toBe(0);
      if (kind === 'sqlite') await vic.shot('call-viewer');

      // The API refuses what the page does not offer: the viewer's key, and a cross-site request
      // (a form or fetch from another origin carries no Authorization header).
      const asViewer = await vic.page.evaluate(
        async ([path, apiKey]) => {
          const r = await fetch(path, {
            method: 'POST',
            headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' },
            body: JSON.stringify({ status: 'failed', reason: 'forged' }),
          });
          return r.status;
        },
        [`/v1/tool-executions/${encodeURIComponent(key)}/resolve`, s.keys.viewer] as const,
      );
      expect(asViewer).toBe(403);
      const forged = await fetch(`${s.base}/v1/tool-executions/${encodeURIComponent(key)}/resolve`, {
        method: 'POST',
        headers: { origin: 'https://evil.example', 'content-type': 'application/x-www-form-urlencoded' },
        body: 'status=completed&reason=forged',
      });
      expect(forged.status).toBe(401);
      expect((await call(s, 'GET', `/v1/tool-executions/${key}`)).body.record).toMatchObject({
        status: 'indeterminate',
        version: 2,
      });
      expect(vic.errors).toEqual([]);
      await vic.page.context().close();
    });

    it('two operators settling at once: one wins, the other is shown the call as it stands', async () => {
      const runId = await startRun(s, 'payer');
      const key = await unknownCallOf(s, runId);
      const [ana, bo] = await Promise.all([
        Operator.signIn(browser, s.base, s.keys.ana),
        Operator.signIn(browser, s.base, s.keys.bo),
      ]);
      for (const [op, status] of [
        [ana, 'It took effect (completed)'],
        [bo, 'It did not take effect (failed)'],
      ] as const) {
        await op.page.goto(`${s.base}/console#/calls/${encodeURIComponent(key)}`);
        await op.page.getByRole('button', { name: 'Settle' }).waitFor();
        await op.page.getByLabel(status).check();
        await op.page.getByLabel('Reason (required; kept in the history)').fill(`checked by ${status}`);
      }
      await Promise.all([ana, bo].map((op) => op.page.getByRole('button', { name: 'Settle' }).click()));
      const outcome = async (op: Operator) => {
        await op.page.locator('main #refusal, main .notice-ok').first().waitFor();
        return (await op.page.locator('#refusal').count()) > 0 ? 'refused' : 'won';
      };
      const results = await Promise.all([outcome(ana), outcome(bo)]);
      expect([...results].sort()).toEqual(['refused', 'won']);
      const loser = results[0] === 'refused' ? ana : bo;
      const refusal = await loser.page.locator('#refusal').textContent();
      expect(refusal).toContain('409 LEDGER_ALREADY_SETTLED');
      expect(refusal).toMatch(/as it stands now: (completed|failed), version 3/);
      if (kind === 'sqlite') await loser.shot('call-refused');
      const history = (await call(s, 'GET', `/v1/tool-executions/${key}`)).body.history as {
        via: string;
        actor: { kind: string };
      }[];
      expect(history.filter((e) => e.actor.kind === 'operator')).toHaveLength(1);
      await Promise.all([ana, bo].map((op) => op.page.context().close()));
    });

    it('an approval decided from the console, and the run it held completes', async () => {
      const runId = await startRun(s, 'refunder');
      const ana = await Operator.signIn(browser, s.base, s.keys.ana);
      const link = ana.page.getByRole('link', { name: /^Decide approval / });
      await link.waitFor({ timeout: 15_000 });
      await ana.click(link);
      await ana.page.getByRole('heading', { name: /Approval of refund/ }).waitFor();
      if (kind === 'sqlite') await ana.shot('approval');
      await ana.page.getByLabel(/^Reason/).fill('amount matches the ticket');
      await ana.click(ana.page.getByRole('button', { name: 'Approve' }));
      await ana.page.getByText('Approved.', { exact: true }).waitFor();
      await waitFor(
        'the approved run to complete',
        async () => ((await runStatus(s, runId)) === 'completed' ? true : undefined),
        20_000,
        100,
      );
      const approvals = (await call(s, 'GET', '/v1/approvals?status=consumed')).body.items as {
        run_id: string;
        decided_by: string;
      }[];
      expect(approvals.find((a) => a.run_id === runId)?.decided_by).toBe('ops-ana');

      // The runs page and a run's page with its live events, and the workers page.
      await ana.page.goto(`${s.base}/console#/runs/${runId}`);
      // Its events as a timeline: what happened in words, who, and the raw event only on demand.
      await ana.page.locator('.event-what', { hasText: 'Now completed' }).waitFor();
      await ana.page.locator('.event-meta', { hasText: '· worker ' }).first().waitFor();
      expect(await ana.page.locator('.event details[open]').count()).toBe(0);
      await ana.page.getByRole('link', { name: 'Runs', exact: true }).click();
      await ana.page.getByRole('link', { name: runId, exact: true }).first().waitFor();
      if (kind === 'sqlite') await ana.shot('runs');
      await ana.page.getByRole('link', { name: 'Workers' }).click();
      await ana.page.getByRole('heading', { name: 'Workers' }).waitFor();
      await ana.page.getByRole('cell', { name: 'live' }).first().waitFor();
      // An operator is not told where workers run (host and pid are an admin's), and is told why.
      await ana.page.getByRole('cell', { name: 'hidden (admins only)' }).first().waitFor();
      if (kind === 'sqlite') await ana.shot('workers');
      expect(ana.errors).toEqual([]);
      await ana.page.context().close();
    });

    it('a workflow run shows its node and the node run, and an operator cancels it from the console', async () => {
      const started = await call(s, 'POST', '/v1/workflow-runs', {
        workflow: 'refund-flow',
        input: 'order o_7',
      });
      expect(started.status).toBe(201);
      const id = started.body.workflow_run_id as string;
      const ana = await Operator.signIn(browser, s.base, s.keys.ana);
      await ana.click(ana.page.getByRole('link', { name: 'Workflows', exact: true }));
      // Exact names: the inbox, shown before, links the node run's approval, whose name holds the id.
      await ana.page.getByRole('heading', { name: 'Workflows', exact: true }).waitFor();
      await ana.click(ana.page.getByRole('link', { name: id, exact: true }));
      await ana.page.getByRole('heading', { name: `Workflow run ${id} running` }).waitFor();
      // The node's run, started by the worker of `oncely serve`, waits for its approval.
      const runLink = ana.page.getByRole('link', { name: `${id}.refund.1`, exact: true });
      await runLink.waitFor({ timeout: 15_000 });
      await ana.page.getByText('(awaiting_approval)').waitFor({ timeout: 15_000 });
      if (kind === 'sqlite') await ana.shot('workflow');
      await ana.page.getByLabel(/^Reason/).fill('the customer withdrew');
      await ana.click(ana.page.getByRole('button', { name: 'Cancel workflow run' }));
      await ana.page.locator('main p.notice-ok', { hasText: 'Cancelled.' }).first().waitFor();
      expect((await call(s, 'GET', `/v1/workflow-runs/${id}`)).body.status).toBe('cancelled');
      expect(await runStatus(s, `${id}.refund.1`)).toBe('cancelled');
      await ana.click(runLink);
      await ana.page.getByRole('heading', { name: new RegExp(`^Run ${id}\\.refund\\.1`) }).waitFor();
      expect(ana.errors).toEqual([]);
      await ana.page.context().close();
    });

    it.runIf(kind === 'sqlite')("every page passes axe-core's WCAG 2 A and AA checks", async () => {
      const runId = await startRun(s, 'payer');
      const flow = (await call(s, 'POST', '/v1/workflow-runs', { workflow: 'refund-flow', input: 'axe' }))
        .body.workflow_run_id as string;
      const key = await unknownCallOf(s, runId);
      // axe is injected as a script, which the console's policy would refuse: a context of its own
      // that bypasses the policy, for this check only.
      const context = await browser.newContext({ bypassCSP: true, viewport: { width: 1280, height: 900 } });
      const page = await context.newPage();
      await page.goto(`${s.base}/console`);
      await page.getByLabel('API key').fill(s.keys.ana);
      await page.getByRole('button', { name: 'Sign in' }).click();
      const pages: [string, () => Promise<void>][] = [
        ['inbox', () => page.getByRole('heading', { name: /^Unknown calls/ }).waitFor()],
        [`calls/${encodeURIComponent(key)}`, () => page.getByRole('button', { name: 'Settle' }).waitFor()],
        [`runs/${runId}`, () => page.getByRole('heading', { name: 'Events (live)' }).waitFor()],
        ['runs', () => page.getByRole('link', { name: runId }).waitFor()],
        ['workers', () => page.getByRole('cell', { name: 'live' }).first().waitFor()],
        ['workflows', () => page.getByRole('link', { name: flow, exact: true }).waitFor()],
        [`workflows/${flow}`, () => page.getByRole('heading', { name: 'Nodes' }).waitFor()],
      ];
      const found: string[] = [];
      for (const [hash, ready] of pages) {
        await page.goto(`${s.base}/console#/${hash}`);
        await ready();
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
        // axe ran and checked something (a check that found nothing to look at proves nothing).
        expect(passed, hash).toBeGreaterThan(5);
        found.push(...violations.map((v) => `${hash.split('/')[0]}: ${v}`));
      }
      expect(found).toEqual([]);
      await context.close();
    });

    it("another tenant's call answers not found, and a phone-sized screen still shows the inbox", async () => {
      const runId = await startRun(s, 'payer');
      const key = await unknownCallOf(s, runId);
      const gus = await Operator.signIn(browser, s.base, s.keys.other, 390, 844);
      await gus.page.goto(`${s.base}/console#/calls/${encodeURIComponent(key)}`);
      await gus.page
        .locator('main')
        .getByText(/^Not found: /)
        .waitFor();
      expect(await gus.page.getByText('pay_partner').count()).toBe(0);
      await gus.page.goto(`${s.base}/console#/inbox`);
      await gus.page.getByRole('heading', { name: 'Unknown calls (0)' }).waitFor();
      if (kind === 'sqlite') await gus.shot('inbox-phone-other-tenant');
      await gus.page.context().close();
    });
  });
});
