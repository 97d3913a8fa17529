import { randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type { JsonValue } from '../../ledger/index.js';
import type { Clock } from '../../util/clock.js';
import {
  beginRaceError,
  outcomeOfExisting,
  type BeginOutcome,
  type BeginRequest,
  type KeyClaim,
  type KeyRecord,
  type KeyStatus,
  type KeyStore,
  type Settlement,
} from '../key-store.js';
import { RECEIVER_MIGRATIONS_TABLE, assertReceiverSchema, receiverMigrations } from '../migrations.js';

/*
 * The key store in a SQLite file (WAL). Each write is one statement; the begin is an insert that
 * takes over only a `failed` or expired row, compare-and-set in its WHERE, so of many processes
 * beginning one key exactly one gets `run`. Waits up to 15 s for another process's write lock.
 */

interface Row {
  scope: string;
  key: string;
  status: KeyStatus;
  fingerprint: string;
  subject: string | null;
  attempt: number;
  response: string | null;
  error: string | null;
  started_at: number;
  settled_at: number | null;
}

const BEGIN = `
INSERT INTO oncely_receiver_keys (scope, key, status, fingerprint, subject, token, attempt, started_at)
VALUES (@scope, @key, 'started', @fingerprint, @subject, @token, 1, @now)
ON CONFLICT (scope, key) DO UPDATE SET
  status = 'started', fingerprint = excluded.fingerprint, subject = excluded.subject,
  token = excluded.token, attempt = oncely_receiver_keys.attempt + 1, started_at = excluded.started_at,
  response = NULL, error = NULL, settled_at = NULL
WHERE oncely_receiver_keys.status = 'failed'
   OR (oncely_receiver_keys.status = 'completed' AND oncely_receiver_keys.settled_at <= @expiredBefore)
RETURNING attempt`;

const SELECT = `
SELECT scope, key, status, fingerprint, subject, attempt, response, error, started_at, settled_at
FROM oncely_receiver_keys WHERE scope = ? AND key = ?`;

const FINISH = `
UPDATE oncely_receiver_keys SET status = @status, response = @response, error = @error, settled_at = @now
WHERE scope = @scope AND key = @key AND token = @token AND status = 'started'`;

const SETTLE = `
UPDATE oncely_receiver_keys SET status = @status, response = @response, error = @error, settled_at = @now
WHERE scope = @scope AND key = @key AND status IN ('started', 'unknown')`;

const PURGE = `
DELETE FROM oncely_receiver_keys
WHERE status IN ('completed', 'failed') AND settled_at <= @expiredBefore`;

export class SqliteKeyStore implements KeyStore {
  readonly dialect = 'sqlite' as const;

  private constructor(
    private readonly db: Database.Database,
    readonly keepForMs: number,
    private readonly clock: Clock,
  ) {}

  static open(path: string, options: { keepForMs: number; clock: Clock; migrate: boolean }): SqliteKeyStore {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    const db = new Database(path);
    try {
      db.pragma('journal_mode = WAL');
      db.pragma('busy_timeout = 15000');
      migrate(db, path, options.migrate);
    } catch (error) {
      db.close();
      throw error;
    }
    return new SqliteKeyStore(db, options.keepForMs, options.clock);
  }

  begin(request: BeginRequest): Promise<BeginOutcome> {
    const scope = request.scope ?? '';
    for (let tries = 0; tries < 5; tries++) {
      const now = this.clock.now();
      const token = randomUUID();
      const won = this.db.prepare<unknown[], { attempt: number }>(BEGIN).get({
        scope,
        key: request.key,
        fingerprint: request.fingerprint,
        subject: request.subject ?? null,
        token,
        now,
        expiredBefore: now - this.keepForMs,
      });
      if (won !== undefined) {
        return Promise.resolve({
          kind: 'run',
          claim: { scope, key: request.key, token, attempt: won.attempt },
        });
      }
      const row = this.row(scope, request.key);
      const found =
        row === undefined
          ? undefined
          : {
              record: recordOf(row),
              expired: row.status === 'completed' && (row.settled_at ?? 0) <= now - this.keepForMs,
            };
      const outcome = outcomeOfExisting(found, request.fingerprint);
      if (outcome !== 'retry') return Promise.resolve(outcome);
    }
    return Promise.reject(beginRaceError(request.key));
  }

  complete(claim: KeyClaim, response: JsonValue): Promise<boolean> {
    return this.finish(claim, 'completed', JSON.stringify(response), null);
  }

  fail(claim: KeyClaim, reason?: string): Promise<boolean> {
    return this.finish(claim, 'failed', null, reason ?? null);
  }

  abandon(claim: KeyClaim, error: string): Promise<boolean> {
    return this.finish(claim, 'unknown', null, error);
  }

  lookup(key: string, scope = ''): Promise<KeyRecord | undefined> {
    const row = this.row(scope, key);
    return Promise.resolve(row === undefined ? undefined : recordOf(row));
  }

  settle(key: string, settlement: Settlement, scope = ''): Promise<boolean> {
    const changed = this.db.prepare(SETTLE).run({
      scope,
      key,
      status: settlement.status,
      response: settlement.status === 'completed' ? JSON.stringify(settlement.response) : null,
      error: settlement.reason,
      now: this.clock.now(),
    }).changes;
    return Promise.resolve(changed === 1);
  }

  purgeExpired(): Promise<number> {
    const { changes } = this.db.prepare(PURGE).run({ expiredBefore: this.clock.now() - this.keepForMs });
    return Promise.resolve(changes);
  }

  close(): Promise<void> {
    this.db.close();
    return Promise.resolve();
  }

  private finish(
    claim: KeyClaim,
    status: KeyStatus,
    response: string | null,
    error: string | null,
  ): Promise<boolean> {
    const { changes } = this.db.prepare(FINISH).run({
      scope: claim.scope,
      key: claim.key,
      token: claim.token,
      status,
      response,
      error,
      now: this.clock.now(),
    });
    return Promise.resolve(changes === 1);
  }

  private row(scope: string, key: string): Row | undefined {
    return this.db.prepare<unknown[], Row>(SELECT).get(scope, key);
  }
}

function recordOf(row: Row): KeyRecord {
  return {
    scope: row.scope,
    key: row.key,
    status: row.status,
    fingerprint: row.fingerprint,
    subject: row.subject,
    attempt: row.attempt,
    response: row.response === null ? null : (JSON.parse(row.response) as JsonValue),
    error: row.error,
    startedAt: new Date(row.started_at).toISOString(),
    settledAt: row.settled_at === null ? null : new Date(row.settled_at).toISOString(),
  };
}

/** Applies the key store's pending migrations under the write lock (a second process waits, then sees them). */
function migrate(db: Database.Database, path: string, allowed: boolean): void {
  const migrations = receiverMigrations('sqlite');
  const latest = migrations.at(-1)?.version ?? 0;
  db.exec('BEGIN IMMEDIATE');
  try {
    db.exec(`CREATE TABLE IF NOT EXISTS ${RECEIVER_MIGRATIONS_TABLE} (
      version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`);
    const applied =
      db.prepare<[], { v: number | null }>(`SELECT MAX(version) AS v FROM ${RECEIVER_MIGRATIONS_TABLE}`).get()
        ?.v ?? 0;
    if (applied < latest && allowed) {
      for (const m of migrations.filter((m) => m.version > applied)) {
        db.exec(m.sql);
        db.prepare(
          `INSERT INTO ${RECEIVER_MIGRATIONS_TABLE} (version, name, applied_at) VALUES (?, ?, ?)`,
        ).run(m.version, m.name, Date.now());
      }
    } else {
      assertReceiverSchema(applied, latest, `sqlite:${path}`);
    }
    db.exec('COMMIT');
  } catch (error) {
    db.exec('ROLLBACK');
    throw error;
  }
}
