/**
 * Databases the peer cases create beside the runner's scratch database, on the same server.
 * Names are checked, then quoted: they come from a URL, and PostgreSQL cannot bind an identifier.
 */
import pg from 'pg';

const NAME = /^[A-Za-z0-9_]{1,63}$/;

/** The database name of a PostgreSQL URL: `postgres://h/bench_1` → `bench_1`. */
export function databaseName(url: string): string {
  return checkedName(decodeURIComponent(new URL(url).pathname.replace(/^\//, '')));
}

/** The same server and credentials as `url`, another database. */
export function withDatabase(url: string, name: string): string {
  const next = new URL(url);
  next.pathname = `/${checkedName(name)}`;
  return next.toString();
}

export async function createDatabase(url: string, name: string): Promise<string> {
  await onServer(url, `CREATE DATABASE "${checkedName(name)}"`);
  return withDatabase(url, name);
}

/** Drops `name` even if a pool still holds connections to it. */
export async function dropDatabase(url: string, name: string): Promise<void> {
  await onServer(url, `DROP DATABASE IF EXISTS "${checkedName(name)}" WITH (FORCE)`);
}

/** One query on a short-lived connection to `url`; returns the first column of the first row. */
export async function queryOne(url: string, sql: string, params: unknown[] = []): Promise<unknown> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<Record<string, unknown>>(sql, params);
    const row = rows[0];
    return row === undefined ? undefined : Object.values(row)[0];
  } finally {
    await client.end();
  }
}

async function onServer(url: string, sql: string): Promise<void> {
  // CREATE/DROP DATABASE cannot run inside the target, so connect to the server's `postgres` database.
  await queryOne(withDatabase(url, 'postgres'), sql);
}

function checkedName(name: string): string {
  if (!NAME.test(name)) {
    throw new Error(`database name ${JSON.stringify(name)} is not 1-63 letters, digits or underscores`);
  }
  return name;
}
