import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/store/index.js';
import { tempSqlitePath } from '../support/databases.js';
import { OncelyProcess } from '../support/processes.js';

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

/** Runs the built `oncely` CLI to its end (20 s at most). */
async function oncely(args: readonly string[]): Promise<Ran> {
  const child = new OncelyProcess(args, { ONCELY_DATABASE_URL: undefined });
  const exit = await child.exit(20_000);
  return { code: exit.code, stdout: child.stdout, stderr: child.stderr };
}

/** A SQLite path in a folder of its own that does not exist yet: nothing may make it but --create. */
function missingPath(label: string): string {
  const file = tempSqlitePath(label);
  cleanups.push(() => file.cleanup());
  return join(dirname(file.path), 'ledger', 'oncely.db');
}

const keyArgs = (path: string): string[] => [
  'keys',
  'create',
  '--tenant',
  'acme',
  '--actor',
  'ops-ana',
  '--role',
  'admin',
  '--database-url',
  `sqlite:${path}`,
];

/** The keys the ledger at `path` holds for acme, read without creating anything. */
async function keysIn(path: string): Promise<string[]> {
  const store = await openStore(`sqlite:${path}`, { create: false, migrate: false });
  try {
    return (await store.apiKeys.list('acme', { limit: 100 })).map((k) => k.actorId);
  } finally {
    await store.close();
  }
}

function expectRefused(ran: Ran, path: string): void {
  expect(ran.code, ran.stderr).toBe(1);
  expect(ran.stderr).toMatch(/^oncely: STORE_NOT_FOUND: /);
  expect(ran.stderr).toContain(`oncely migrate --create --database-url sqlite:${path}`);
  expect(existsSync(path)).toBe(false);
  expect(existsSync(dirname(path))).toBe(false);
}

describe('only an explicit --create makes a SQLite ledger', () => {
  it('keys create, list and revoke refuse a missing file with STORE_NOT_FOUND and create nothing', async () => {
    const path = missingPath('keys_missing');
    expectRefused(await oncely(keyArgs(path)), path);
    expectRefused(
      await oncely(['keys', 'list', '--tenant', 'acme', '--database-url', `sqlite:${path}`]),
      path,
    );
    expectRefused(
      await oncely([
        'keys',
        'revoke',
        'key_000000000000',
        '--tenant',
        'acme',
        '--database-url',
        `sqlite:${path}`,
      ]),
      path,
    );
  });

  it('migrate refuses a missing file without --create, and creates nothing', async () => {
    const path = missingPath('migrate_missing');
    const ran = await oncely(['migrate', '--database-url', `sqlite:${path}`]);
    expectRefused(ran, path);
    expect(ran.stdout).not.toContain('applied');
  });

  it('migrate --create makes the ledger once; keys create then needs no --create', async () => {
    const path = missingPath('migrate_create');
    const made = await oncely(['migrate', '--create', '--database-url', `sqlite:${path}`]);
    expect(made.code, made.stderr).toBe(0);
    expect(made.stdout).toContain('applied 0001_ledger');
    expect(made.stdout).toMatch(/schema current \(version \d+\)/);
    expect(existsSync(path)).toBe(true);

    const again = await oncely(['migrate', '--database-url', `sqlite:${path}`]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('nothing to apply');

    const key = await oncely(keyArgs(path));
    expect(key.code, key.stderr).toBe(0);
    expect(await keysIn(path)).toEqual(['ops-ana']);
  });

  it('keys create --create makes a missing ledger and stores the key in it', async () => {
    const path = missingPath('keys_create');
    const ran = await oncely([...keyArgs(path), '--create']);
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toMatch(/^oncely_[0-9a-f]{12}_/);
    expect(await keysIn(path)).toEqual(['ops-ana']);
  });

  it('a file that holds no oncely schema is refused too, unless --create', async () => {
    const file = tempSqlitePath('empty_file');
    cleanups.push(() => file.cleanup());
    mkdirSync(dirname(file.path), { recursive: true });
    writeFileSync(file.path, '');
    for (const args of [keyArgs(file.path), ['migrate', '--database-url', `sqlite:${file.path}`]]) {
      const ran = await oncely(args);
      expect(ran.code, ran.stderr).toBe(1);
      expect(ran.stderr).toMatch(/^oncely: STORE_NOT_FOUND: sqlite:.* holds no oncely ledger/);
      expect(ran.stdout).not.toContain('applied');
    }
    const check = await oncely(['migrate', '--check', '--database-url', `sqlite:${file.path}`]);
    expect(check.code).toBe(1);
    expect(check.stdout).toContain('schema at version 0');

    const made = await oncely(['migrate', '--create', '--database-url', `sqlite:${file.path}`]);
    expect(made.code, made.stderr).toBe(0);
    expect(statSync(file.path).size).toBeGreaterThan(0);
    expect(await keysIn(file.path)).toEqual([]);
  });
});
