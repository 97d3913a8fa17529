import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/errors/index.js';
import { TRANSITIONS } from '../src/ledger/index.js';

const read = (path: string): string => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');

describe('docs stay true to the code', () => {
  it('docs/errors.md lists every error code', () => {
    const doc = read('docs/errors.md');
    const missing = ERROR_CODES.filter((code) => !new RegExp(`^\\|\\s*\`${code}\`\\s*\\|`, 'm').test(doc));
    expect(missing).toEqual([]);
  });

  it('docs/ledger.md lists exactly the transitions of the table', () => {
    const doc = read('docs/ledger.md');
    const rows = [...doc.matchAll(/^\|\s*(\(no record\)|[a-z]+)\s*\|\s*([a-z]+)\s*\|\s*([a-z]+)\s*\|/gm)]
      .filter((m) => m[1] !== 'from')
      .map((m) => `${m[1] === '(no record)' ? 'null' : m[1]}>${m[2]}>${m[3]}`);
    const table = TRANSITIONS.map((t) => `${t.from ?? 'null'}>${t.to}>${t.via}`);
    expect(rows.sort()).toEqual([...table].sort());
  });

  it('docs/ledger.md shows the reservation statement the PostgreSQL store runs', () => {
    const source = read('src/store/postgres/ledger.ts');
    const statement = /const RESERVE = `\n([\s\S]*?)`;/.exec(source)?.[1];
    expect(statement).toBeDefined();
    expect(read('docs/ledger.md')).toContain(statement);
  });

  it("the README's example is examples/quickstart.ts, and it runs as written", () => {
    const example = read('examples/quickstart.ts');
    expect(read('README.md')).toContain(example);
    const output = execFileSync(process.execPath, ['--import', 'tsx', 'examples/quickstart.ts'], {
      cwd: new URL('..', import.meta.url),
      encoding: 'utf8',
    });
    expect(output.trim()).toBe('completed completed ledger 1');
  });
});
