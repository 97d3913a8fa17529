import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/index.js';
import { createTestDatabase } from '../support/databases.js';

/*
 * Run-event notifications on PostgreSQL (schemas 0011, 0012): a statement that writes run events
 * notifies `oncely_run_events` once for each run it wrote events of that someone watches (a live row
 * in run_event_watches), on commit, and never for a run nobody watches. The trigger runs once per
 * statement: a grouped step write inserts the events of several runs in several common table
 * expressions, and each watched run of them is heard once.
 */

describe('run-event notifications (PostgreSQL)', () => {
  let db: { url: string; drop(): Promise<void> };
  let writer: pg.Client;
  let listener: pg.Client;
  const heard: string[] = [];

  beforeAll(async () => {
    db = await createTestDatabase('run_event_notify');
    const store = await openStore(db.url, { migrate: true });
    await store.close();
    writer = new pg.Client({ connectionString: db.url });
    listener = new pg.Client({ connectionString: db.url });
    await writer.connect();
    await listener.connect();
    listener.on('notification', (n) => {
      if (n.channel === 'oncely_run_events') heard.push(n.payload ?? '');
    });
    await listener.query('LISTEN oncely_run_events');
    await writer.query(
      `INSERT INTO run_event_watches (tenant_id, run_id, watcher, expires_at) VALUES
         ('acme', 'watched_a', 'api_1', now() + interval '1 minute'),
         ('acme', 'watched_b', 'api_1', now() + interval '1 minute'),
         ('acme', 'watched_b', 'api_2', now() + interval '1 minute'),
         ('acme', 'expired', 'api_1', now() - interval '1 second')`,
    );
  });
  afterAll(async () => {
    await writer?.end();
    await listener?.end();
    await db?.drop();
  });

  /** What the listener hears after `sql` commits (a notification arrives after its commit). */
  async function heardAfter(sql: string): Promise<string[]> {
    heard.length = 0;
    await writer.query(sql);
    // A marker notified after the statement: once it is heard, everything sent before it was too.
    await writer.query(`SELECT pg_notify('oncely_run_events', 'marker')`);
    for (let i = 0; i < 200 && !heard.includes('marker'); i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(heard).toContain('marker');
    return heard.filter((p) => p !== 'marker').sort();
  }

  const run = (id: string): string => `acme\u001f${id}`;

  it('is a statement trigger on run_events', async () => {
    const { rows } = await writer.query<{ action_orientation: string }>(
      `SELECT action_orientation FROM information_schema.triggers
       WHERE event_object_table = 'run_events' AND trigger_name = 'run_events_wake'`,
    );
    expect(rows).toEqual([{ action_orientation: 'STATEMENT' }]);
  });

  it('notifies each watched run of a statement once, across its common table expressions', async () => {
    const payloads = await heardAfter(
      `WITH one AS (
         INSERT INTO run_events (tenant_id, run_id, seq, type, data) VALUES
           ('acme', 'watched_a', 1, 'x', '{}'), ('acme', 'watched_a', 2, 'x', '{}'),
           ('acme', 'unwatched', 1, 'x', '{}'), ('acme', 'expired', 1, 'x', '{}')
       ), two AS (
         INSERT INTO run_events (tenant_id, run_id, seq, type, data) VALUES ('acme', 'watched_b', 1, 'x', '{}')
       )
       SELECT 1`,
    );
    expect(payloads).toEqual([run('watched_a'), run('watched_b')]);
  });

  it('sends nothing for runs nobody watches, nor for a statement that wrote no event', async () => {
    expect(
      await heardAfter(
        `INSERT INTO run_events (tenant_id, run_id, seq, type, data) VALUES ('acme', 'unwatched', 2, 'x', '{}')`,
      ),
    ).toEqual([]);
    expect(
      await heardAfter(
        `INSERT INTO run_events (tenant_id, run_id, seq, type, data)
         SELECT 'acme', 'watched_a', 3, 'x', '{}' WHERE false`,
      ),
    ).toEqual([]);
  });

  it('sends nothing when the transaction rolls back', async () => {
    heard.length = 0;
    await writer.query('BEGIN');
    await writer.query(
      `INSERT INTO run_events (tenant_id, run_id, seq, type, data) VALUES ('acme', 'watched_a', 4, 'x', '{}')`,
    );
    await writer.query('ROLLBACK');
    expect(await heardAfter('SELECT 1')).toEqual([]);
  });
});
