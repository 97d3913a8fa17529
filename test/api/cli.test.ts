/* eslint-disable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-call -- HTTP answers are JSON of no static type, read by assertions */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OncelyProcess } from '../support/processes.js';
import { DIALECTS, TENANT, ApiHarness } from './support/harness.js';

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the built `oncely` CLI to its end. */
async function oncely(args: readonly string[], env: Record<string, string | undefined> = {}): Promise<Ran> {
  const child = new OncelyProcess(args, { ONCELY_API_URL: undefined, ONCELY_API_KEY: undefined, ...env });
  const exit = await child.exit(20_000);
  return { code: exit.code, stdout: child.stdout, stderr: child.stderr };
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  return typeof address === 'object' && address !== null ? address.port : 0;
}

describe.each(DIALECTS)('oncely keys create on %s', (dialect) => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  it('prints a key once, stores only its hash, and the key works against the API with its role', async () => {
    const ran = await oncely([
      'keys',
      'create',
      '--tenant',
      TENANT,
      '--actor',
      'ops-cli',
      '--role',
      'operator',
      '--database-url',
      h.url,
    ]);
    expect(ran.code, ran.stderr).toBe(0);
    const key = ran.stdout.split('\n')[0]!;
    expect(key).toMatch(/^oncely_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$/);
    expect(ran.stdout).toContain('only time the key is shown');
    const snapshot = await h.snapshot();
    expect(snapshot).not.toContain(key);
    expect(snapshot).toContain(createHash('sha256').update(key).digest('hex'));
    const record = await h.seedCall('indeterminate');
    const answer = await h.request('POST', `/v1/tool-executions/${record.idempotencyKey}/resolve`, {
      key,
      body: { status: 'failed', reason: 'checked' },
    });
    expect(answer.status).toBe(200);
    expect(answer.body.settled_by).toEqual({ kind: 'operator', id: 'ops-cli' });

    const bad = await oncely([
      'keys',
      'create',
      '--tenant',
      TENANT,
      '--actor',
      'has space',
      '--role',
      'operator',
      '--database-url',
      h.url,
    ]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('LEDGER_ACTOR_INVALID');
  });

  it('keys list shows who created each key, apart from the actor it acts as', async () => {
    const minted = await h.request('POST', '/v1/api-keys', {
      key: h.keys.admin,
      body: { actor_id: 'ops-gus', role: 'operator' },
    });
    expect(minted.status).toBe(201);
    const keyId = minted.body.api_key.key_id as string;
    const listed = await oncely(['keys', 'list', '--tenant', TENANT, '--database-url', h.url]);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(/^KEY ID\s+ACTOR\s+ROLE\s+CREATED BY\s+CREATED\s+REVOKED\n/);
    expect(listed.stdout).toMatch(new RegExp(`${keyId}\\s+ops-gus\\s+operator\\s+ops-admin\\s`));
    expect(listed.stdout).toMatch(/key_[0-9a-f]{12}\s+ops-admin\s+admin\s+-\s/);
    const json = await oncely(['keys', 'list', '--tenant', TENANT, '--database-url', h.url, '--json']);
    const row = (JSON.parse(json.stdout) as { keyId: string }[]).find((k) => k.keyId === keyId);
    expect(row).toMatchObject({ keyId, actorId: 'ops-gus', createdBy: 'ops-admin' });
  });
});

describe('the operator CLI against a running API', () => {
  let h: ApiHarness;
  let env: Record<string, string>;

  beforeAll(async () => {
    h = await ApiHarness.start('sqlite');
    env = { ONCELY_API_URL: h.base, ONCELY_API_KEY: h.keys.operator };
  });
  afterAll(async () => {
    await h.close();
  });

  it('executions list | show | resolve: a readable table, --json for scripts, and the decision in the ledger', async () => {
    const record = await h.seedCall('indeterminate');
    const listed = await oncely(['executions', 'list'], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(/^KEY\s+TOOL\s+STATUS\s+WAITING\s+DETAIL/);
    expect(listed.stdout).toMatch(new RegExp(`${record.idempotencyKey}\\s+issue_credit\\s+indeterminate`));
    const json = await oncely(['executions', 'list', '--json'], env);
    expect(
      JSON.parse(json.stdout).items.map((r: { idempotency_key: string }) => r.idempotency_key),
    ).toContain(record.idempotencyKey);

    const shown = await oncely(['executions', 'show', record.idempotencyKey], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain('indeterminate');
    expect(shown.stdout).toMatch(/transition\s+started -> indeterminate\s+runtime:seed/);

    const resolved = await oncely(
      [
        'executions',
        'resolve',
        record.idempotencyKey,
        '--status',
        'completed',
        '--reason',
        'receipt cr_1 in billing',
        '--result',
        '{"receipt":"cr_1"}',
        '--result-reference',
        'cr_1',
      ],
      env,
    );
    expect(resolved.code, resolved.stderr).toBe(0);
    expect(resolved.stdout).toBe(`${record.idempotencyKey} is now completed\n`);
    expect(await h.store.ledger.get(TENANT, record.idempotencyKey)).toMatchObject({
      status: 'completed',
      result: { receipt: 'cr_1' },
      resultReference: 'cr_1',
      settledBy: { kind: 'operator', id: 'ops-ana' },
    });

    const again = await oncely(
      ['executions', 'resolve', record.idempotencyKey, '--status', 'failed', '--reason', 'x'],
      env,
    );
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(
      /^oncely: LEDGER_ALREADY_SETTLED: tool call \S+ is already completed \(settled by operator ops-ana\)/,
    );
    const badJson = await oncely(
      [
        'executions',
        'resolve',
        record.idempotencyKey,
        '--status',
        'completed',
        '--reason',
        'x',
        '--result',
        '{oops',
      ],
      env,
    );
    expect(badJson.code).toBe(1);
    expect(badJson.stderr).toContain('--result must be JSON');
  });

  it('executions incidents | resolve KEY KEY | reconcile: found together, settled together, a hook asked now', async () => {
    const a = await h.seedCall('indeterminate');
    const b = await h.seedCall('indeterminate', { toolName: 'checked_credit' });
    const found = await oncely(['executions', 'incidents', '--search', b.idempotencyKey], env);
    expect(found.code, found.stderr).toBe(0);
    expect(found.stdout).toContain('checked_credit · billing (1)');
    expect(found.stdout).toContain(b.idempotencyKey);
    expect(found.stdout).not.toContain(a.idempotencyKey);

    const asked = await oncely(['executions', 'reconcile', b.idempotencyKey], env);
    expect(asked.code, asked.stderr).toBe(0);
    expect(asked.stdout).toBe(
      `asked the reconcile hook of ${b.idempotencyKey}: it could not tell (no credit under ${b.idempotencyKey} in the books yet); the call is indeterminate\n`,
    );
    const noHook = await oncely(['executions', 'reconcile', a.idempotencyKey], env);
    expect(noHook.code).toBe(1);
    expect(noHook.stderr).toContain('LEDGER_NOT_RECONCILABLE');

    const together = await oncely(
      [
        'executions',
        'resolve',
        a.idempotencyKey,
        b.idempotencyKey,
        '--status',
        'failed',
        '--reason',
        'outage: none arrived',
      ],
      env,
    );
    expect(together.code, together.stderr).toBe(0);
    expect(together.stdout).toMatch(/^settled 2 together \(together_[0-9a-f]{12}\):\n/);
    for (const key of [a.idempotencyKey, b.idempotencyKey]) {
      expect(await h.store.ledger.get(TENANT, key)).toMatchObject({
        status: 'failed',
        settledBy: { id: 'ops-ana' },
      });
    }
    const again = await oncely(
      [
        'executions',
        'resolve',
        a.idempotencyKey,
        b.idempotencyKey,
        '--status',
        'failed',
        '--reason',
        'again',
      ],
      env,
    );
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('settled 0 together');
    expect(again.stdout).toContain(`${a.idempotencyKey}: LEDGER_ALREADY_SETTLED (failed)`);
  });

  it('executions compensate runs the hook once and says so', async () => {
    const record = await h.seedCall('completed');
    const ran = await oncely(
      ['executions', 'compensate', record.idempotencyKey, '--reason', 'wrong account'],
      env,
    );
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toBe(
      `${record.idempotencyKey} is compensated (${record.idempotencyKey}:compensation completed)\n`,
    );
    expect(h.fixtures.downstream.refunds).toContain(`${record.idempotencyKey}:compensation`);
    expect((await h.store.ledger.get(TENANT, record.idempotencyKey))?.status).toBe('compensated');
  });

  it('approvals list | approve | reject', async () => {
    const first = await h.drivenRun('approval-agent');
    const second = await h.drivenRun('approval-agent');
    const [a] = await h.store.runs.approvalsOfRun(TENANT, first);
    const [b] = await h.store.runs.approvalsOfRun(TENANT, second);
    const listed = await oncely(['approvals', 'list', '--status', 'pending'], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(new RegExp(`${a!.idempotencyKey}\\s+approved_credit\\s+pending`));
    const approved = await oncely(['approvals', 'approve', a!.idempotencyKey], env);
    expect([approved.code, approved.stdout]).toEqual([0, `${a!.idempotencyKey} is approved\n`]);
    const noReason = await oncely(['approvals', 'reject', b!.idempotencyKey], env);
    expect(noReason.code).toBe(1);
    expect(noReason.stderr).toContain("required option '--reason <text>' not specified");
    const rejected = await oncely(
      ['approvals', 'reject', b!.idempotencyKey, '--reason', 'not owed', '--json'],
      env,
    );
    expect(rejected.code, rejected.stderr).toBe(0);
    expect(JSON.parse(rejected.stdout)).toMatchObject({
      status: 'rejected',
      reason: 'not owed',
      decided_by: 'ops-ana',
    });
    expect((await h.store.runs.getApproval(TENANT, b!.idempotencyKey))?.status).toBe('rejected');
  });

  it('approvals list shows a repeat with the earlier call: its args, status, result and reference', async () => {
    const runId = await h.drivenRun('repeat-agent');
    const [approval] = await h.store.runs.approvalsOfRun(TENANT, runId);
    const key = approval!.idempotencyKey;
    const first = approval!.repeatOf!;
    expect(first).toMatch(new RegExp(`^${runId}:`));
    const listed = await oncely(['approvals', 'list', '--status', 'pending'], env);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(/^KEY\s+TOOL\s+STATUS\s+AGE\s+REPEAT OF\s+ARGS\n/);
    expect(listed.stdout).toMatch(new RegExp(`${key}\\s+issue_credit\\s+pending\\s+\\S+\\s+${first}\\s+\\{`));
    const args = '{"accountId":"acct_1","amountCents":2500}';
    expect(listed.stdout).toContain(
      `${key} repeats ${first} (issue_credit):\n` +
        `  this call: ${args}\n` +
        `  earlier:   ${args}\n` +
        `             completed, result {"receipt":"cr_${first}"}, reference cr_${first}\n`,
    );
    const json = await oncely(['approvals', 'list', '--status', 'pending', '--json'], env);
    const page = JSON.parse(json.stdout) as { items: { idempotency_key: string }[] };
    const item = page.items.find((a) => a.idempotency_key === key);
    expect(item).toMatchObject({
      repeat_of: first,
      args: { accountId: 'acct_1', amountCents: 2500 },
      earlier: { idempotency_key: first, status: 'completed', result_reference: `cr_${first}` },
    });
  });

  it('runs list | show | cancel', async () => {
    const runId = await h.drivenRun('approval-agent');
    const listed = await oncely(['runs', 'list', '--status', 'awaiting_approval'], env);
    expect(listed.stdout).toMatch(new RegExp(`${runId}\\s+approval-agent\\s+awaiting_approval`));
    const shown = await oncely(['runs', 'show', runId], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain(`${runId}  approval-agent  awaiting_approval`);
    expect(shown.stdout).toMatch(/CALL\s+TOOL\s+HEARD/);
    const cancelled = await oncely(['runs', 'cancel', runId, '--reason', 'duplicate request'], env);
    expect([cancelled.code, cancelled.stdout]).toEqual([0, `${runId} is cancelled\n`]);
    expect((await h.store.runs.get(TENANT, runId))?.status).toBe('cancelled');
    const missing = await oncely(['runs', 'show', 'run_nope'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('RUN_NOT_FOUND');
    const notFailed = await oncely(['runs', 'retry', runId, '--reason', 'try again'], env);
    expect([notFailed.code, notFailed.stderr]).toEqual([1, expect.stringContaining('RUN_NOT_RETRYABLE')]);
  });

  it('workflows start | list | show | cancel | decide', async () => {
    const id = `cli-wf-${Date.now()}`;
    const started = await oncely(['workflows', 'start', 'review', '"order ord_3"', '--id', id], env);
    expect([started.code, started.stdout]).toEqual([0, `${id} (review) is running\n`]);
    expect((await h.store.workflows.get(TENANT, id))?.input).toBe('order ord_3');
    await h.workflows.advanceDue(100);
    const listed = await oncely(['workflows', 'list', '--workflow', 'review'], env);
    expect(listed.stdout).toMatch(new RegExp(`${id}\\s+review\\s+running`));
    const shown = await oncely(['workflows', 'show', id], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(new RegExp(`a\\s+credit-agent\\s+running\\s+${id}\\.a\\.1 \\(queued\\)`));
    expect(shown.stdout).toMatch(/b\s+approval-agent\s+waiting\s+-/);
    const notPaused = await oncely(
      ['workflows', 'decide', id, '--node', 'a', '--action', 'retry', '--reason', 'nothing failed'],
      env,
    );
    expect([notPaused.code, notPaused.stderr]).toEqual([1, expect.stringContaining('WORKFLOW_NOT_PAUSED')]);
    const cancelled = await oncely(['workflows', 'cancel', id, '--reason', 'withdrawn'], env);
    expect([cancelled.code, cancelled.stdout]).toEqual([0, `${id} is cancelled\n`]);
    expect((await h.store.runs.get(TENANT, `${id}.a.1`))?.status).toBe('cancelled');
    const missing = await oncely(['workflows', 'show', 'wf_nope'], env);
    expect([missing.code, missing.stderr]).toEqual([1, expect.stringContaining('WORKFLOW_NOT_FOUND')]);
  });

  it('runs send | messages, and usage', async () => {
    const runId = await h.drivenRun('chat-agent');
    const sent = await oncely(['runs', 'send', runId, 'and $3 more', '--id', 'cli-msg-2'], env);
    expect([sent.code, sent.stdout]).toEqual([
      0,
      `${runId} turn 2: message cli-msg-2 taken; the run is queued\n`,
    ]);
    const again = await oncely(['runs', 'send', runId, 'other words', '--id', 'cli-msg-2'], env);
    expect([again.code, again.stderr]).toEqual([1, expect.stringContaining('RUN_MESSAGE_CONFLICT')]);
    const notJson = await oncely(
      ['runs', 'send', runId, '[oops', '--id', 'cli-msg-3', '--content-json'],
      env,
    );
    expect([notJson.code, notJson.stderr]).toEqual([1, expect.stringContaining('--content-json')]);
    await h.runtime.drive(TENANT, runId);
    const shown = await oncely(['runs', 'messages', runId], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout.split('\n').filter((l) => l.startsWith('user: ') || l.startsWith('agent: '))).toEqual(
      ['user: go', 'agent: Credited, turn 1.', 'user: and $3 more', 'agent: Credited, turn 2.'],
    );
    expect(shown.stdout).toMatch(/ {2}call issue_credit \{"accountId":"acct_1","amountCents":300\} -> /);
    const asJson = await oncely(['runs', 'messages', runId, '--json', '--format', 'model'], env);
    expect(JSON.parse(asJson.stdout).messages).toHaveLength(8);
    const usage = await oncely(['usage'], env);
    expect(usage.code, usage.stderr).toBe(0);
    expect(usage.stdout).toMatch(/chat-agent\s+\d+\s+\d+/);
    expect(usage.stdout).toMatch(/\(all\)/);
  });

  it('runs retry queues a failed run again, and executions resolve --force settles a call in flight', async () => {
    const { run } = await h.runtime.startRun({ tenantId: TENANT, agent: 'credit-agent', input: 'retry me' });
    const claimed = await h.store.runs.claim(TENANT, run.runId, 'cli-test', 60_000);
    const failed = await h.store.runs.saveCheckpoint({
      fence: {
        tenantId: TENANT,
        runId: run.runId,
        leaseEpoch: claimed!.leaseEpoch,
        checkpointVersion: claimed!.checkpointVersion,
      },
      checkpoint: claimed!.checkpoint,
      storedMessages: claimed!.checkpoint.messages.length,
      status: 'failed',
      error: { code: 'MODEL_CALL_FAILED', message: 'the provider stayed down' },
      reason: 'the provider stayed down',
    });
    expect(failed).toBeDefined();
    const noReason = await oncely(['runs', 'retry', run.runId], env);
    expect(noReason.code).not.toBe(0);
    const retried = await oncely(['runs', 'retry', run.runId, '--reason', 'the provider is back'], env);
    expect([retried.code, retried.stdout]).toEqual([
      0,
      `${run.runId} is queued: a worker drives it from its last checkpoint\n`,
    ]);
    expect(await h.store.runs.get(TENANT, run.runId)).toMatchObject({ status: 'queued', error: null });

    // An attempt that may still run for a minute: in flight, not unknown.
    const started = await h.seedCall('started', { timeoutMs: 60_000 });
    const refused = await oncely(
      ['executions', 'resolve', started.idempotencyKey, '--status', 'failed', '--reason', 'not sent'],
      env,
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('CALL_IN_FLIGHT');
    const forced = await oncely(
      [
        'executions',
        'resolve',
        started.idempotencyKey,
        '--status',
        'failed',
        '--reason',
        'not sent',
        '--force',
      ],
      env,
    );
    expect([forced.code, forced.stdout]).toEqual([0, `${started.idempotencyKey} is now failed\n`]);
    const history = await h.store.ledger.history(TENANT, started.idempotencyKey);
    expect(history.at(-1)).toMatchObject({
      via: 'resolve',
      reason: 'forced: not sent',
      detail: { forced: true },
    });
  });

  it('worker refuses to start when its configuration defines no agents', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'oncely-no-agents-'));
    try {
      const config = join(dir, 'oncely.yaml');
      writeFileSync(config, 'storage: {}\n');
      const ran = await oncely([
        'worker',
        '-c',
        config,
        '--database-url',
        `sqlite:${join(dir, 'db.sqlite')}`,
      ]);
      expect(ran.code).toBe(1);
      expect(ran.stderr).toContain(
        `oncely: CONFIG_INVALID: ${config} defines no agents, so this worker could drive no run`,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('errors say what to do: no key, a bad key, a viewer key, no server', async () => {
    const noKey = await oncely(['executions', 'list'], { ONCELY_API_URL: h.base });
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toContain('API_KEY_MISSING: no API key: set ONCELY_API_KEY (or pass --api-key)');
    const badKey = await oncely(
      ['executions', 'list', '--api-key', 'oncely_000000000000_' + 'A'.repeat(43)],
      {
        ONCELY_API_URL: h.base,
      },
    );
    expect(badKey.code).toBe(1);
    expect(badKey.stderr).toContain('API_KEY_INVALID');
    expect(badKey.stderr).toContain('check ONCELY_API_KEY');
    const viewer = await oncely(['runs', 'cancel', 'run_x', '--reason', 'x'], {
      ...env,
      ONCELY_API_KEY: h.keys.viewer,
    });
    expect(viewer.stderr).toContain("API_FORBIDDEN: this key's role is viewer");
    const port = await closedPort();
    const down = await oncely(['runs', 'list', '--api-url', `http://127.0.0.1:${port}`], env);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain('API_UNREACHABLE');
    expect(down.stderr).toContain('is `oncely serve` running there?');
  });
});

describe('docs/cli.md', () => {
  it('shows an example of every operator command, `keys` and `serve`', () => {
    const doc = readFileSync(new URL('../../docs/cli.md', import.meta.url), 'utf8');
    const commands = [
      'executions list',
      'executions show',
      'executions resolve',
      'executions reconcile',
      'executions incidents',
      'executions compensate',
      'approvals list',
      'approvals approve',
      'approvals reject',
      'runs list',
      'runs show',
      'runs cancel',
      'runs retry',
      'runs send',
      'runs messages',
      'usage',
      'workers',
      'workflows start',
      'workflows list',
      'workflows show',
      'workflows decide',
      'workflows cancel',
      'keys create',
      'keys list',
      'keys revoke',
      'serve',
    ];
    const missing = commands.filter((c) => !doc.includes(`$ oncely ${c}`));
    expect(missing).toEqual([]);
  });
});
