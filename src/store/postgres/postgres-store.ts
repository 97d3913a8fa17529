import pg from 'pg';
import { OncelyError } from '../../errors/index.js';
import { latestVersion, loadMigrations, schemaStateOf, tooNewError } from '../migrations.js';
import type { ApiKeyStore } from '../api-key-store.js';
import type { MonitorStore } from '../monitor-store.js';
import type { RunStore } from '../run-store.js';
import type { LedgerStore, MigrationReport, SchemaState, Store, StoreTx } from '../store.js';
import { PostgresApiKeys } from './api-keys.js';
import { PostgresLedger, type Queryable } from './ledger.js';
import { PostgresMonitor } from './monitor.js';
import { PostgresRuns } from './runs.js';
import { UNDEFINED_TABLE } from './sqlstate.js';

/** Any fixed number: two processes migrating at once queue on this advisory lock. */
const MIGRATION_LOCK = 0x6f6e63656c79;

export interface PostgresStoreOptions {
  /** Called once at open with a warning the operator must see (e.g. `synchronous_commit` off). */
  readonly warn?: (message: string) => void;
  readonly maxConnections?: number;
}

/** The production store: any number of processes on any number of machines share one PostgreSQL. */
export class PostgresStore implements Store {
  readonly dialect = 'postgres' as const;
  readonly ledger: LedgerStore;
  readonly runs: RunStore;
  readonly apiKeys: ApiKeyStore;
  readonly monitor: MonitorStore;

  private constructor(private readonly pool: pg.Pool) {
    this.ledger = new PostgresLedger(pool);
    this.runs = new PostgresRuns(pool);
    this.apiKeys = new PostgresApiKeys(pool);
    this.monitor = new PostgresMonitor(pool);
  }

  static async open(url: string, options: PostgresStoreOptions = {}): Promise<PostgresStore> {
    const pool = new pg.Pool({
      connectionString: url,
      max: options.maxConnections ?? 10,
      types: { getTypeParser },
    });
    // An idle client's error (the server went away) must not crash the process; the next query reports it.
    pool.on('error', () => undefined);
    try {
      const { rows } = await pool.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
      if (rows[0]?.synchronous_commit === 'off') {
        (options.warn ?? ((m: string) => process.stderr.write(`${m}\n`)))(
          'WARNING: PostgreSQL synchronous_commit is off. A database server crash can lose commits the ' +
            'ledger already reported, so a tool call could run twice. Set synchronous_commit = on.',
        );
      }
    } catch (cause) {
      await pool.end();
      throw new OncelyError(
        'STORE_UNAVAILABLE',
        `cannot reach PostgreSQL at ${redact(url)}: ${String(cause)}`,
        {
          cause,
        },
      );
    }
    return new PostgresStore(pool);
  }

  async transaction<T>(fn: (tx: StoreTx) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const value = await fn({ ledger: new PostgresLedger(client), runs: new PostgresRuns(client) });
      await client.query('COMMIT');
      return value;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
  }

  async migrate(): Promise<MigrationReport> {
    const migrations = loadMigrations('postgres');
    const latest = latestVersion(migrations);
    const client = await this.pool.connect();
    const applied: string[] = [];
    try {
      await client.query('BEGIN');
      // The lock is taken before anything is read, so a second migrator waits and then sees our rows.
      await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      const current = await appliedVersion(client);
      if (current > latest) throw tooNewError(current, latest);
      for (const m of migrations.filter((m) => m.version > current)) {
        await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
          m.version,
          m.name,
        ]);
        await client.query(m.sql);
        applied.push(`${String(m.version).padStart(4, '0')}_${m.name}`);
      }
      await client.query('COMMIT');
      return { applied, version: latest };
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      if (error instanceof OncelyError) throw error;
      throw new OncelyError(
        'SCHEMA_MIGRATION_FAILED',
        `migration failed and was rolled back: ${String(error)}`,
        {
          cause: error,
        },
      );
    } finally {
      client.release();
    }
  }

  async schemaState(): Promise<SchemaState> {
    return schemaStateOf(await appliedVersion(this.pool), latestVersion(loadMigrations('postgres')));
  }

  async close(): Promise<void> {
    await this.pool.end();
  }
}

async function appliedVersion(db: Queryable): Promise<number> {
  try {
    const { rows } = await db.query<{ v: number | null }>('SELECT MAX(version) AS v FROM schema_migrations');
    return rows[0]?.v ?? 0;
  } catch (error) {
    if ((error as { code?: string }).code === UNDEFINED_TABLE) return 0;
    throw error;
  }
}

const JSON_OIDS = new Set([114, 3802]);

/**
 * JSON columns come back as text, as they do from SQLite, so one decoder serves both stores (pg would
 * otherwise hand back a JSON string value as a bare JavaScript string, indistinguishable from text).
 */
function getTypeParser(oid: number, format?: 'text' | 'binary'): (value: string) => unknown {
  if (JSON_OIDS.has(oid)) return (value: string) => value;
  return format === 'binary'
    ? (pg.types.getTypeParser(oid, 'binary') as (value: string) => unknown)
    : (pg.types.getTypeParser(oid, 'text') as (value: string) => unknown);
}

/** The URL with its password masked, for messages. */
export function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparseable URL)';
  }
}
