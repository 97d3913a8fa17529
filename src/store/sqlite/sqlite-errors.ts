import { OncelyError } from '../../errors/index.js';

/** The primary result code of a better-sqlite3 error (`SQLITE_IOERR_WRITE` → `SQLITE_IOERR`), if it is one. */
export function sqliteCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !code.startsWith('SQLITE_')) return undefined;
  const [, primary] = /^(SQLITE_[A-Z]+)/.exec(code) ?? [];
  return primary;
}

/** Another connection holds the lock this statement needs: nothing was done, and it may be tried again. */
export function isBusy(error: unknown): boolean {
  const code = sqliteCode(error);
  return code === 'SQLITE_BUSY' || code === 'SQLITE_LOCKED';
}

/** What to tell an operator about a SQLite failure that is the file's or the disk's, not the caller's. */
const OUTAGES: Record<string, (path: string) => string> = {
  SQLITE_FULL: (p) => `the disk holding ${p} is full; free space, then try again`,
  SQLITE_IOERR: (p) => `reading or writing ${p} failed (an I/O error); check the disk`,
  SQLITE_READONLY: (p) =>
    `${p} is read-only; oncely must write the file and its directory (for the -wal and -shm files)`,
  SQLITE_CANTOPEN: (p) => `cannot open ${p}; check the path exists and this user may read and write it`,
  SQLITE_PERM: (p) => `this user may not open ${p}; check its permissions`,
  SQLITE_NOTADB: (p) => `${p} is not a SQLite database; check the path`,
  SQLITE_CORRUPT: (p) => `${p} is corrupt; restore it from a backup`,
  SQLITE_NOLFS: (p) => `${p} is too large for this file system`,
  SQLITE_PROTOCOL: (p) => `the locks on ${p} are failing; check no network file system holds it`,
};

/**
 * A SQLite error as the store's coded error: `STORE_UNAVAILABLE` with a one-line message saying what
 * to do for the disk's and the file's failures; anything else (a constraint, a bug) as it was.
 */
export function asStoreError(error: unknown, path: string): unknown {
  const code = sqliteCode(error);
  const say = code === undefined ? undefined : OUTAGES[code];
  if (say === undefined) return error;
  return new OncelyError('STORE_UNAVAILABLE', say(path), { cause: error, details: { sqlite: code } });
}

export function lockedTooLong(path: string, waitedMs: number): OncelyError {
  return new OncelyError(
    'STORE_UNAVAILABLE',
    `${path} stayed locked by another process for ${Math.round(waitedMs / 1000)} s; ` +
      'find the process holding it (a long transaction, a backup, a stopped debugger) and try again',
    { details: { sqlite: 'SQLITE_BUSY', waitedMs } },
  );
}
