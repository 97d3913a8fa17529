import type Database from 'better-sqlite3';

/** Distinct statements one connection keeps; past this the oldest is let go (list queries vary). */
export const MAX_STATEMENTS = 256;

/**
 * Makes `db.prepare` return the statement it prepared before for the same text, so a store call
 * does not compile its SQL again each time (compiling was most of a small query's cost). Safe with
 * better-sqlite3: a statement runs to completion synchronously and is reset after each use, and the
 * store never iterates one or changes its mode (`raw`, `pluck`, `expand`); SQLite compiles a cached
 * statement again by itself when the schema changed.
 */
export function cacheStatements(db: Database.Database): void {
  const prepare = db.prepare.bind(db);
  const cache = new Map<string, Database.Statement>();
  const cached = (source: string): Database.Statement => {
    let statement = cache.get(source);
    if (statement === undefined) {
      statement = prepare(source);
      if (cache.size >= MAX_STATEMENTS) cache.delete(cache.keys().next().value!);
      cache.set(source, statement);
    }
    return statement;
  };
  db.prepare = cached as Database.Database['prepare'];
}
