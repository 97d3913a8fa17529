import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type SendMessageRequest, type Store } from '../../src/store/index.js';
import { SqliteStore } from '../../src/store/sqlite/index.js';
import type { Checkpoint, RunUsage } from '../../src/run-state/index.js';
import { argsDigest } from '../../src/ledger/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';

type Opened = { store: Store; url: string; cleanup(): Promise<void> };

const STORES: [string, () => Promise<Opened>][] = [
  [
    'sqlite',
    async () => {
      const file = tempSqlitePath('conversations');
      const url = `sqlite:${file.path}`;
      const store = await openStore(url, { migrate: true });
      return { store, url, cleanup: async () => (await store.close(), file.cleanup()) };
    },
  ],
  [
    'postgres',
    async () => {
      const db = await createTestDatabase('conversations');
      const store = await openStore(db.url, { migrate: true });
      return { store, url: db.url, cleanup: async () => (await store.close(), await db.drop()) };
    },
  ],
];

const TENANT = 't1';
let seq = 0;
const runId = (): string => `run_${process.pid}_${++seq}`;
const usage = (input: number, output: number, reasoning = 0, cached = 0): RunUsage => ({
  inputTokens: input,
  outputTokens: output,
  reasoningTokens: reasoning,
  cachedInputTokens: cached,
  totalTokens: input + output,
});
const userMessage = (text: string) => ({ role: 'user', content: text });

describe.each(STORES)('conversations on %s', (name, open) => {
  let opened: Opened;
  let store: Store;
  let second: Store;

  beforeAll(async () => {
    opened = await open();
    store = opened.store;
    second =
      name === 'sqlite'
        ? await SqliteStore.open(opened.url.slice('sqlite:'.length))
        : await openStore(opened.url);
  });

  afterAll(async () => {
    await second.close();
    await opened.cleanup();
  });

  /** A run driven to `completed` by one model response costing `cost`. */
  async function completedRun(cost: RunUsage, agent = 'a', budget: number | null = null) {
    const id = runId();
    const first: Checkpoint = { messages: [userMessage('hi')], step: 0, pending: null };
    const { run } = await store.runs.create({
      tenantId: TENANT,
      runId: id,
      agent,
      input: 'hi',
      checkpoint: first,
      claim: { owner: 'w1', leaseMs: 30_000 },
      tokenBudget: budget,
    });
    const version = await store.runs.saveCheckpoint({
      fence: {
        tenantId: TENANT,
        runId: id,
        leaseEpoch: run.leaseEpoch,
        checkpointVersion: run.checkpointVersion,
      },
      checkpoint: {
        messages: [...first.messages, { role: 'assistant', content: 'hello' }],
        step: 1,
        pending: null,
      },
      storedMessages: 1,
      status: 'completed',
      result: { text: 'hello' },
      usage: cost,
      modelAnswered: true,
    });
    expect(version).toBe(run.checkpointVersion + 1);
    return id;
  }

  const send = (id: string, clientMessageId: string, text: string, via = store) => {
    const message = userMessage(text);
    const request: SendMessageRequest = {
      tenantId: TENANT,
      runId: id,
      clientMessageId,
      message,
      messageDigest: argsDigest(message),
      actorId: 'cust-1',
      reason: 'a new message: the next turn',
    };
    return via.runs.sendMessage(request);
  };

  it('takes the next message of a completed run in one write: appended, a turn, the run queued, two events', async () => {
    const id = await completedRun(usage(10, 5));
    const before = await store.runs.get(TENANT, id);
    const sent = await send(id, 'm-2', 'and the other order?');
    expect(sent?.kind).toBe('sent');
    if (sent?.kind !== 'sent') return;
    expect(sent.turn).toMatchObject({ turn: 2, clientMessageId: 'm-2', messageIndex: 2, actorId: 'cust-1' });
    expect(sent.run).toMatchObject({
      status: 'queued',
      turn: 2,
      turnStep: 1,
      result: null,
      leaseOwner: null,
      checkpointVersion: before!.checkpointVersion + 1,
    });
    const after = await store.runs.get(TENANT, id);
    expect(after?.checkpoint.messages).toEqual([
      userMessage('hi'),
      { role: 'assistant', content: 'hello' },
      userMessage('and the other order?'),
    ]);
    const events = await store.runs.events(TENANT, id, 0, 100);
    expect(events.slice(-2).map((e) => [e.type, e.data])).toEqual([
      ['run.message', { turn: 2, clientMessageId: 'm-2', messageIndex: 2, actor: 'cust-1' }],
      ['run.status', { status: 'queued', reason: 'a new message: the next turn' }],
    ]);
    expect(await store.runs.turns(TENANT, id)).toEqual([sent.turn]);
    // A worker claims it for the turn, and the conversation it reads holds the message.
    const claimed = await store.runs.claim(TENANT, id, 'w2', 30_000);
    expect(claimed?.checkpoint.messages).toHaveLength(3);
    expect(claimed?.turn).toBe(2);
  });

  it('answers the same client message id with its turn, refuses it with other content, and refuses a run not done', async () => {
    const id = await completedRun(usage(1, 1));
    const sent = await send(id, 'm-2', 'refund order 7');
    expect(sent?.kind).toBe('sent');
    // The run is queued now: the same message again is that turn, not a refusal and not a second turn.
    const again = await send(id, 'm-2', 'refund order 7', second);
    expect(again?.kind).toBe('replayed');
    expect(again?.kind === 'replayed' && again.turn.turn).toBe(2);
    const other = await send(id, 'm-2', 'refund order 8');
    expect(other?.kind).toBe('mismatch');
    const early = await send(id, 'm-3', 'are you there?');
    expect(early).toMatchObject({ kind: 'not_ready', run: { status: 'queued' } });
    expect((await store.runs.get(TENANT, id))?.checkpoint.messages).toHaveLength(3);
    expect(await store.runs.turns(TENANT, id)).toHaveLength(1);
    expect(await send('run_none', 'm-1', 'hello')).toBeUndefined();
  });

  it('of two connections sending at once, one message is taken; with one id, the other gets that turn', async () => {
    for (const ids of [
      ['m-a', 'm-b'],
      ['m-same', 'm-same'],
    ] as const) {
      const id = await completedRun(usage(1, 1));
      const results = await Promise.all([send(id, ids[0], 'first'), send(id, ids[1], 'first', second)]);
      const kinds = results.map((r) => r?.kind).sort();
      expect(kinds).toEqual(ids[0] === ids[1] ? ['replayed', 'sent'] : ['not_ready', 'sent']);
      expect((await store.runs.get(TENANT, id))?.checkpoint.messages).toHaveLength(3);
      expect(await store.runs.turns(TENANT, id)).toHaveLength(1);
    }
  });

  it('sums the usage of each response the run keeps, once per save, and a tenant by agent', async () => {
    const tenantUsageBefore = await store.runs.usage(TENANT, {});
    const a = await completedRun(usage(100, 20, 5, 40), 'agent-u1');
    const b = await completedRun(usage(7, 3), 'agent-u1');
    const c = await completedRun(usage(50, 50), 'agent-u2', 1_000);
    const run = await store.runs.summary(TENANT, a);
    expect(run?.usage).toEqual(usage(100, 20, 5, 40));
    expect(run?.lastInputTokens).toBe(100);
    expect((await store.runs.summary(TENANT, c))?.tokenBudget).toBe(1_000);
    expect((await store.runs.summary(TENANT, b))?.tokenBudget).toBeNull();
    // A second turn adds its responses; a save without a response adds nothing.
    await send(a, 'm-2', 'more');
    const claimed = await store.runs.claim(TENANT, a, 'w2', 30_000);
    const fence = {
      tenantId: TENANT,
      runId: a,
      leaseEpoch: claimed!.leaseEpoch,
      checkpointVersion: claimed!.checkpointVersion,
    };
    const messages = [...claimed!.checkpoint.messages, { role: 'assistant', content: 'done' }];
    const v = await store.runs.saveCheckpoint({
      fence,
      checkpoint: { messages, step: 2, pending: null },
      storedMessages: 3,
      status: 'running',
      usage: usage(130, 10),
    });
    await store.runs.saveCheckpoint({
      fence: { ...fence, checkpointVersion: v! },
      checkpoint: { messages, step: 2, pending: null },
      storedMessages: 4,
      status: 'completed',
    });
    const after = await store.runs.summary(TENANT, a);
    expect(after?.usage).toEqual({ ...usage(230, 30), reasoningTokens: 5, cachedInputTokens: 40 });
    expect(after?.lastInputTokens).toBe(130);
    const tenant = await store.runs.usage(TENANT, {});
    expect(tenant.runs - tenantUsageBefore.runs).toBe(3);
    const u1 = tenant.byAgent.find((x) => x.agent === 'agent-u1');
    expect(u1).toEqual({
      agent: 'agent-u1',
      runs: 2,
      usage: { ...usage(237, 33), reasoningTokens: 5, cachedInputTokens: 40 },
    });
    expect(tenant.byAgent.find((x) => x.agent === 'agent-u2')?.usage).toEqual(usage(50, 50));
    expect(tenant.usage.totalTokens - tenantUsageBefore.usage.totalTokens).toBe(270 + 100);
    // A window that ends before the runs were made holds none of them; another tenant sees nothing.
    expect((await store.runs.usage(TENANT, { to: '2000-01-01T00:00:00.000Z' })).runs).toBe(0);
    expect(await store.runs.usage('t-other', {})).toEqual({ runs: 0, usage: usage(0, 0), byAgent: [] });
  });

  it('keeps turns append-only', async () => {
    const id = await completedRun(usage(1, 1));
    await send(id, 'm-2', 'x');
    for (const sql of [`UPDATE run_turns SET client_message_id = 'y'`, 'DELETE FROM run_turns']) {
      if (name === 'sqlite') {
        const raw = new Database(opened.url.slice('sqlite:'.length));
        try {
          expect(() => raw.exec(sql)).toThrow(/append-only/);
        } finally {
          raw.close();
        }
      } else {
        const client = new pg.Client({ connectionString: opened.url });
        await client.connect();
        try {
          await expect(client.query(sql)).rejects.toThrow(/append-only/);
        } finally {
          await client.end();
        }
      }
    }
    expect(await store.runs.turns(TENANT, id)).toMatchObject([{ clientMessageId: 'm-2' }]);
  });
});
