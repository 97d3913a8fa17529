import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isOncelyError } from '../../src/index.js';
import {
  assertReceiverKey,
  openKeyStore,
  requestFingerprint,
  type BeginOutcome,
  type KeyStore,
} from '../../src/receiver/index.js';
import { createTestDatabase, tempSqlitePath } from '../support/databases.js';

/*
 * The receiving side's key store on a real SQLite file and a real PostgreSQL database: one run per
 * key however many begin it at once, a replay of the stored response, another fingerprint refused,
 * a failed key run again, an abandoned or crashed one never, an operator's settlement, expiry.
 */

type Kind = 'sqlite' | 'postgres';

async function database(kind: Kind): Promise<{ url: string; drop(): Promise<void> }> {
  if (kind === 'postgres') return createTestDatabase('receiver_keys');
  const file = tempSqlitePath('receiver-keys');
  return { url: `sqlite:${file.path}`, drop: () => Promise.resolve(file.cleanup()) };
}

const fp = (args: unknown) => requestFingerprint('issue_credit', args);
const A = fp({ amountCents: 2500 });
const B = fp({ amountCents: 9900 });

describe.each<Kind>(['sqlite', 'postgres'])('the receiver key store on %s', (kind) => {
  let db: { url: string; drop(): Promise<void> };
  const opened: KeyStore[] = [];
  const open = async (keepForMs?: number): Promise<KeyStore> => {
    const store = await openKeyStore(db.url, keepForMs === undefined ? {} : { keepForMs });
    opened.push(store);
    return store;
  };
  beforeEach(async () => {
    db = await database(kind);
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((s) => s.close()));
    await db.drop();
  });

  it('runs a key once, says in progress while it runs, replays the stored response, refuses another fingerprint', async () => {
    const keys = await open();
    const first = await keys.begin({ key: 'run_1:call_1', fingerprint: A, subject: 'issue_credit' });
    expect(first).toMatchObject({ kind: 'run', claim: { scope: '', key: 'run_1:call_1', attempt: 1 } });
    expect(await keys.begin({ key: 'run_1:call_1', fingerprint: A })).toMatchObject({
      kind: 'in_progress',
      record: { status: 'started', subject: 'issue_credit' },
    });
    if (first.kind !== 'run') throw new Error('not run');
    expect(await keys.complete(first.claim, { receipt: 'cr_1' })).toBe(true);
    expect(await keys.begin({ key: 'run_1:call_1', fingerprint: A })).toMatchObject({
      kind: 'replay',
      record: { status: 'completed', response: { receipt: 'cr_1' }, attempt: 1 },
    });
    expect(await keys.begin({ key: 'run_1:call_1', fingerprint: B })).toMatchObject({
      kind: 'mismatch',
      record: { status: 'completed', fingerprint: A, subject: 'issue_credit' },
    });
    // The runner's claim is spent: a second complete changes nothing.
    expect(await keys.complete(first.claim, { receipt: 'cr_2' })).toBe(false);
    const record = await keys.lookup('run_1:call_1');
    expect(record).toMatchObject({ status: 'completed', response: { receipt: 'cr_1' } });
    expect(Date.parse(record!.settledAt!)).toBeGreaterThanOrEqual(Date.parse(record!.startedAt));
    expect(await keys.lookup('run_1:never')).toBeUndefined();
  });

  it('runs a failed key again (any fingerprint), never an abandoned one; an operator settles it', async () => {
    const keys = await open();
    const first = await keys.begin({ key: 'k_failed', fingerprint: A });
    if (first.kind !== 'run') throw new Error('not run');
    expect(await keys.fail(first.claim, 'card declined')).toBe(true);
    const again = await keys.begin({ key: 'k_failed', fingerprint: B });
    expect(again).toMatchObject({ kind: 'run', claim: { attempt: 2 } });

    const thrown = await keys.begin({ key: 'k_thrown', fingerprint: A });
    if (thrown.kind !== 'run') throw new Error('not run');
    expect(await keys.abandon(thrown.claim, 'connection reset mid-way')).toBe(true);
    expect(await keys.begin({ key: 'k_thrown', fingerprint: A })).toMatchObject({
      kind: 'unknown',
      record: { status: 'unknown', error: 'connection reset mid-way' },
    });
    expect(await keys.settle('k_thrown', { status: 'failed', reason: 'the bank has no such transfer' })).toBe(
      true,
    );
    expect(await keys.begin({ key: 'k_thrown', fingerprint: A })).toMatchObject({
      kind: 'run',
      claim: { attempt: 2 },
    });

    // A crashed runner's key stays started; settled completed, its late complete changes nothing.
    const crashed = await keys.begin({ key: 'k_crashed', fingerprint: A });
    if (crashed.kind !== 'run') throw new Error('not run');
    expect(
      await keys.settle('k_crashed', {
        status: 'completed',
        response: { receipt: 'by hand' },
        reason: 'seen',
      }),
    ).toBe(true);
    expect(await keys.complete(crashed.claim, { receipt: 'late' })).toBe(false);
    expect(await keys.lookup('k_crashed')).toMatchObject({
      status: 'completed',
      response: { receipt: 'by hand' },
      error: 'seen',
    });
    // Settling is for started or unknown keys only.
    expect(await keys.settle('k_crashed', { status: 'failed', reason: 'again' })).toBe(false);
    expect(await keys.settle('k_none', { status: 'failed', reason: 'none' })).toBe(false);
  });

  it('of 50 begins of one key at once, across 5 connections, exactly one runs', async () => {
    const stores = await Promise.all([0, 1, 2, 3, 4].map(() => open()));
    const outcomes: BeginOutcome[] = await Promise.all(
      Array.from({ length: 50 }, (_, i) => stores[i % 5]!.begin({ key: 'hot', fingerprint: A })),
    );
    const kinds = outcomes.map((o) => o.kind);
    expect(kinds.filter((k) => k === 'run')).toHaveLength(1);
    expect(kinds.filter((k) => k === 'in_progress')).toHaveLength(49);
    expect(await stores[0]!.lookup('hot')).toMatchObject({ status: 'started', attempt: 1 });
  });

  it('keeps the same key in two scopes apart', async () => {
    const keys = await open();
    expect((await keys.begin({ key: 'k', fingerprint: A, scope: 'client_a' })).kind).toBe('run');
    expect((await keys.begin({ key: 'k', fingerprint: B, scope: 'client_b' })).kind).toBe('run');
    expect((await keys.lookup('k', 'client_a'))?.fingerprint).toBe(A);
    expect(await keys.lookup('k')).toBeUndefined();
  });

  it('forgets a completed key after its keep window: it runs as a new one, and the purge deletes it; started keys are kept', async () => {
    const keys = await open(300);
    const first = await keys.begin({ key: 'old', fingerprint: A });
    if (first.kind !== 'run') throw new Error('not run');
    await keys.complete(first.claim, { receipt: 'cr_1' });
    expect((await keys.begin({ key: 'stuck', fingerprint: A })).kind).toBe('run');
    expect((await keys.begin({ key: 'old', fingerprint: A })).kind).toBe('replay');
    await sleep(400);
    const expired = await keys.begin({ key: 'old', fingerprint: A });
    expect(expired).toMatchObject({ kind: 'run', claim: { attempt: 2 } });
    if (expired.kind !== 'run') throw new Error('not run');
    await keys.complete(expired.claim, { receipt: 'cr_2' });
    await sleep(400);
    expect(await keys.purgeExpired()).toBe(1);
    expect(await keys.lookup('old')).toBeUndefined();
    expect(await keys.lookup('stuck')).toMatchObject({ status: 'started' });
  });

  it('migrates once however many open it at once, and refuses a schema newer than it knows', async () => {
    await Promise.all([open(), open(), open()]);
    await Promise.all(opened.splice(0).map((s) => s.close()));
    if (kind === 'sqlite') {
      const file = new Database(db.url.slice('sqlite:'.length));
      expect(file.prepare('SELECT COUNT(*) AS n FROM oncely_receiver_migrations').get()).toEqual({ n: 1 });
      file.prepare("INSERT INTO oncely_receiver_migrations VALUES (99, 'future', 0)").run();
      file.close();
    } else {
      const client = new pg.Client({ connectionString: db.url });
      await client.connect();
      const { rows } = await client.query<{ n: string }>(
        'SELECT COUNT(*) AS n FROM oncely_receiver_migrations',
      );
      expect(rows[0]?.n).toBe('1');
      await client.query("INSERT INTO oncely_receiver_migrations (version, name) VALUES (99, 'future')");
      await client.end();
    }
    const refused = await openKeyStore(db.url).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isOncelyError(refused, 'SCHEMA_TOO_NEW')).toBe(true);
  });
});

describe('receiver keys and URLs', () => {
  it('refuses a key that is not 1-255 characters, and a URL of no known store', async () => {
    expect(() => assertReceiverKey('')).toThrow(/1-255 characters; got 0 characters/);
    expect(() => assertReceiverKey('k'.repeat(256))).toThrow(/got 256 characters/);
    expect(() => assertReceiverKey(7)).toThrow(/got a number/);
    await expect(openKeyStore('mysql://x')).rejects.toThrow(/key store URL "mysql:\/\/x" is not supported/);
  });
});
