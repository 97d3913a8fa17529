import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { OncelyError } from '../../errors/index.js';
import type { JsonValue } from '../../ledger/index.js';
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
 * The key store in PostgreSQL, shared by any number of server processes. Each write is one
 * statement; the begin is an insert that takes over only a `failed` or expired row (compare-and-set
 * in its WHERE), so of many begins of one key at once exactly one gets `run`: the others wait on the
 * key's unique index, then find the row taken. Times are the server's (`now()`).
 */

interface Row {
  scope: string;
  key: string;
  status: KeyStatus;
  fingerprint: string;
  subject: string | null;
  attempt: number;
  response: JsonValue | null;
  error: string | null;
  started_at: Date;
  settled_at: Date | null;
  expired: boolean;
}

/** Two processes migrating the key store at once queue on this advisory lock. */
const MIGRATION_LOCK = 7_340_117_002;
const EXPIRED_BEFORE = `now() - make_interval(secs => $KEEP::double precision / 1000)`;

const BEGIN = `
INSERT INTO oncely_receiver_keys (scope, key, status, fingerprint, subject, token, attempt)
VALUES ($1, $2, 'started', $3, $4, $5, 1)
ON CONFLICT (scope, key) DO UPDATE SET
  status = 'started', fingerprint = EXCLUDED.fingerprint, subject = EXCLUDED.subject,
  token = EXCLUDED.token, attempt = oncely_receiver_keys.attempt + 1, started_at = now(),
  response = NULL, error = NULL, settled_at = NULL
WHERE oncely_receiver_keys.status = 'failed'
   OR (oncely_receiver_keys.status = 'completed' AND oncely_receiver_keys.settled_at <= ${EXPIRED_BEFORE.replace('$KEEP', '$6')})
RETURNING attempt`;

const SELECT = `
SELECT scope, key, status, fingerprint, subject, attempt, response, error, started_at, settled_at,
  (status = 'completed' AND settled_at <= ${EXPIRED_BEFORE.replace('$KEEP', '$3')}) AS expired
FROM oncely_receiver_keys WHERE scope = $1 AND key = $2`;

const FINISH = `
UPDATE oncely_receiver_keys SET status = $5, response = $6::jsonb, error = $7, settled_at = now()
WHERE scope = $1 AND key = $2 AND token = $3 AND status = 'started' AND attempt = $4`;

const SETTLE = `
UPDATE oncely_receiver_keys SET status = $3, response = $4::jsonb, error = $5, settled_at = now()
WHERE scope = $1 AND key = $2 AND status IN ('started', 'unknown')`;

const PURGE = `
DELETE FROM oncely_receiver_keys
WHERE status IN ('completed', 'failed') AND settled_at <= ${EXPIRED_BEFORE.replace('$KEEP', '$1')}`;

export class PostgresKeyStore implements KeyStore {
  readonly dialect = 'postgres' as const;

  private constructor(
    private readonly pool: pg.Pool,
    readonly keepForMs: number,
  ) {}

  static async open(
    url: string,
    options: { keepForMs: number; migrate: boolean },
  ): Promise<PostgresKeyStore> {
    // Idle connections do not keep a server process alive.
    const pool = new pg.Pool({ connectionString: url, max: 10, allowExitOnIdle: true });
    pool.on('error', () => undefined); // an idle connection's loss; the next query reconnects
    try {
      await migrate(pool, url, options.migrate);
    } catch (error) {
      await pool.end();
      throw error;
    }
    return new PostgresKeyStore(pool, options.keepForMs);
  }

  async begin(request: BeginRequest): Promise<BeginOutcome> {
    const scope = request.scope ?? '';
    for (let tries = 0; tries < 5; tries++) {
      const token = randomUUID();
      const won = await this.pool.query<{ attempt: number }>(BEGIN, [
        scope,
        request.key,
        request.fingerprint,
        request.subject ?? null,
        token,
        this.keepForMs,
      ]);
      const attempt = won.rows[0]?.attempt;
      if (attempt !== undefined) return { kind: 'run', claim: { scope, key: request.key, token, attempt } };
      const row = await this.row(scope, request.key);
      const found = row === undefined ? undefined : { record: recordOf(row), expired: row.expired };
      const outcome = outcomeOfExisting(found, request.fingerprint);
      if (outcome !== 'retry') return outcome;
    }
    throw beginRaceError(request.key);
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

  async lookup(key: string, scope = ''): Promise<KeyRecord | undefined> {
    const row = await this.row(scope, key);
    return row === undefined ? undefined : recordOf(row);
  }

  async settle(key: string, settlement: Settlement, scope = ''): Promise<boolean> {
    const { rowCount } = await this.pool.query(SETTLE, [
      scope,
      key,
      settlement.status,
      settlement.status === 'completed' ? JSON.stringify(settlement.response) : null,
      settlement.reason,
    ]);
    return rowCount === 1;
  }

  async purgeExpired(): Promise<number> {
    const { rowCount } = await this.pool.query(PURGE, [this.keepForMs]);
    return rowCount ?? 0;
  }

  async close(): Promise<void> {
    await this.pool.end();
  }

  private async finish(
    claim: KeyClaim,
    status: KeyStatus,
    response: string | null,
    error: string | null,
  ): Promise<boolean> {
    const { rowCount } = await this.pool.query(FINISH, [
      claim.scope,
      claim.key,
      claim.token,
      claim.attempt,
      status,
      response,
      error,
    ]);
    return rowCount === 1;
  }

  private async row(scope: string, key: string): Promise<Row | undefined> {
    const { rows } = await this.pool.query<Row>(SELECT, [scope, key, this.keepForMs]);
    return rows[0];
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
    response: row.response,
    error: row.error,
    startedAt: row.started_at.toISOString(),
    settledAt: row.settled_at?.toISOString() ?? null,
  };
}

/** Applies pending migrations in one transaction, after the advisory lock (a second migrator waits). */
async function migrate(pool: pg.Pool, url: string, allowed: boolean): Promise<void> {
  const migrations = receiverMigrations('postgres');
  const latest = migrations.at(-1)?.version ?? 0;
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await client.query(`CREATE TABLE IF NOT EXISTS ${RECEIVER_MIGRATIONS_TABLE} (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await client.query<{ v: number | null }>(
      `SELECT MAX(version) AS v FROM ${RECEIVER_MIGRATIONS_TABLE}`,
    );
    const applied = rows[0]?.v ?? 0;
    if (applied < latest && allowed) {
      for (const m of migrations.filter((m) => m.version > applied)) {
        await client.query(m.sql);
        await client.query(`INSERT INTO ${RECEIVER_MIGRATIONS_TABLE} (version, name) VALUES ($1, $2)`, [
          m.version,
          m.name,
        ]);
      }
    } else {
      assertReceiverSchema(applied, latest, url.replace(/:[^:@/]*@/, ':***@'));
    }
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    if (error instanceof OncelyError) throw error;
    throw new OncelyError(
      'SCHEMA_MIGRATION_FAILED',
      `the idempotency key store's migration failed: ${String(error)}`,
      {
        cause: error,
      },
    );
  } finally {
    client.release();
  }
}
