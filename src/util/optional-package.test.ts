import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isOncelyError } from '../errors/index.js';
import { loadOptional } from './optional-package.js';

/*
 * Real packages in a temporary node_modules, imported by Node: one that is absent, one that loads,
 * one whose own dependency is absent, one that throws as it loads.
 */
let dir: string;
const importFrom = (file: string) => () => import(pathToFileURL(join(dir, file)).href) as Promise<unknown>;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'oncely-optional-'));
  const pkg = (name: string, source: string): void => {
    mkdirSync(join(dir, 'node_modules', name), { recursive: true });
    writeFileSync(
      join(dir, 'node_modules', name, 'package.json'),
      JSON.stringify({ name, type: 'module', exports: './index.js' }),
    );
    writeFileSync(join(dir, 'node_modules', name, 'index.js'), source);
  };
  pkg('present-pkg', `export const answer = 42;`);
  pkg('needs-absent-dep', `export * from 'absent-dep-of-a-package';`);
  pkg('throws-on-load', `throw new Error('broken at load');`);
  for (const name of ['absent-pkg', 'present-pkg', 'needs-absent-dep', 'throws-on-load']) {
    writeFileSync(join(dir, `${name}.mjs`), `export * from '${name}';`);
  }
});
afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe('loadOptional', () => {
  it('answers PACKAGE_MISSING naming what needs the package and the install command', async () => {
    const error = await loadOptional(
      { name: 'absent-pkg', neededBy: 'the thing', install: 'absent-pkg@2' },
      importFrom('absent-pkg.mjs'),
    ).catch((e: unknown) => e);
    expect(isOncelyError(error, 'PACKAGE_MISSING')).toBe(true);
    expect((error as Error).message).toBe(
      'the thing needs the package absent-pkg, which is not installed: install it with `npm install absent-pkg@2`',
    );
    expect((error as { details?: unknown }).details).toEqual({
      package: 'absent-pkg',
      install: 'npm install absent-pkg@2',
    });
  });

  it('gives the module of a package that is there', async () => {
    const loaded = await loadOptional({ name: 'present-pkg', neededBy: 'x' }, importFrom('present-pkg.mjs'));
    expect((loaded as { answer: number }).answer).toBe(42);
  });

  it("passes on another failure as it is: the package's own missing dependency, an error as it loads", async () => {
    const nested = await loadOptional(
      { name: 'needs-absent-dep', neededBy: 'x' },
      importFrom('needs-absent-dep.mjs'),
    ).catch((e: unknown) => e);
    expect(isOncelyError(nested)).toBe(false);
    expect((nested as Error).message).toContain("'absent-dep-of-a-package'");
    const thrown = await loadOptional(
      { name: 'throws-on-load', neededBy: 'x' },
      importFrom('throws-on-load.mjs'),
    ).catch((e: unknown) => e);
    expect(isOncelyError(thrown)).toBe(false);
    expect((thrown as Error).message).toBe('broken at load');
  });
});
