import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installedAiMajor } from '../../src/models/ai-runtime.js';
import { ROOT } from '../support/processes.js';

/*
 * The optional peer dependencies, really missing: the built package (dist and package.json, copied)
 * beside a node_modules that links every installed package but these, so Node's own resolution fails
 * for them as it does in a user's project that did not install them. Needs `npm run build`.
 */

const MISSING = ['@ai-sdk/openai', '@ai-sdk/anthropic', '@ai-sdk/openai-compatible', 'pg', 'ioredis'];

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'oncely-peers-'));
  cpSync(join(ROOT, 'dist'), join(dir, 'dist'), { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(dir, 'package.json'));
  const from = join(ROOT, 'node_modules');
  const to = join(dir, 'node_modules');
  mkdirSync(to);
  for (const entry of readdirSync(from)) {
    if (entry.startsWith('.')) continue;
    if (!entry.startsWith('@')) {
      if (!MISSING.includes(entry)) symlinkSync(join(from, entry), join(to, entry));
      continue;
    }
    mkdirSync(join(to, entry));
    for (const sub of readdirSync(join(from, entry))) {
      const name = `${entry}/${sub}`;
      if (!MISSING.includes(name)) symlinkSync(join(from, name), join(to, name));
    }
  }
});
afterAll(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** Runs an ES module in the copy; prints what it printed. */
function script(name: string, source: string): string {
  writeFileSync(join(dir, name), source);
  return execFileSync(process.execPath, [name], { cwd: dir, encoding: 'utf8' }).trim();
}

/** The error's code and message as a script in the copy prints them. */
const printError = `.then(() => console.log('no error'), (e) => console.log(JSON.stringify({ code: e.code, message: e.message })))`;

describe('optional peer dependencies that are not installed', () => {
  it('are really missing from the copy, which still loads oncely', () => {
    const out = script(
      'probe.mjs',
      `import { createRequire } from 'node:module';
       const require = createRequire(import.meta.url);
       const found = ${JSON.stringify(MISSING)}.filter((p) => { try { require.resolve(p); return true; } catch { return false; } });
       await import('./dist/index.js');
       console.log(JSON.stringify(found));`,
    );
    expect(out).toBe('[]');
  });

  it('a provider: PACKAGE_MISSING naming the model and the version for the installed AI SDK', () => {
    const major = installedAiMajor();
    const versions = {
      openai: major === 7 ? 4 : 3,
      anthropic: major === 7 ? 4 : 3,
      compat: major === 7 ? 3 : 2,
    };
    const out = script(
      'providers.mjs',
      `import { createModel } from './dist/models/index.js';
       const env = { OPENAI_API_KEY: 'k', ANTHROPIC_API_KEY: 'k' };
       for (const config of [
         { provider: 'openai', model: 'gpt-5-mini' },
         { provider: 'anthropic', model: 'claude-sonnet-4-5' },
         { provider: 'openai-compatible', name: 'ollama', base_url: 'http://127.0.0.1:1/v1', model: 'llama3.1' },
       ]) await createModel(config, env)${printError};`,
    );
    const errors = out.split('\n').map((l) => JSON.parse(l) as { code: string; message: string });
    expect(errors).toEqual([
      {
        code: 'PACKAGE_MISSING',
        message: `the openai model "gpt-5-mini" needs the package @ai-sdk/openai, which is not installed: install it with \`npm install @ai-sdk/openai@${versions.openai}\``,
      },
      {
        code: 'PACKAGE_MISSING',
        message: `the anthropic model "claude-sonnet-4-5" needs the package @ai-sdk/anthropic, which is not installed: install it with \`npm install @ai-sdk/anthropic@${versions.anthropic}\``,
      },
      {
        code: 'PACKAGE_MISSING',
        message: `the openai-compatible model "llama3.1" needs the package @ai-sdk/openai-compatible, which is not installed: install it with \`npm install @ai-sdk/openai-compatible@${versions.compat}\``,
      },
    ]);
  });

  it('pg for a postgres:// ledger and key store, ioredis for Redis wake-ups', () => {
    const out = script(
      'stores.mjs',
      `import { openLedger } from './dist/index.js';
       import { RedisWakeups } from './dist/store/redis-wakeups.js';
       await openLedger('postgres://127.0.0.1:1/none')${printError};
       const { openKeyStore } = await import('./dist/receiver/index.js');
       await openKeyStore('postgres://127.0.0.1:1/none')${printError};
       await RedisWakeups.open('redis://127.0.0.1:1')${printError};
       const ledger = await openLedger('sqlite:' + new URL('./ledger.db', import.meta.url).pathname);
       await ledger.close();
       console.log('sqlite ok');`,
    );
    expect(out.split('\n')).toEqual([
      JSON.stringify({
        code: 'PACKAGE_MISSING',
        message:
          'a PostgreSQL ledger (postgres://…) needs the package pg, which is not installed: install it with `npm install pg`',
      }),
      JSON.stringify({
        code: 'PACKAGE_MISSING',
        message:
          'a PostgreSQL key store (postgres://…) needs the package pg, which is not installed: install it with `npm install pg`',
      }),
      JSON.stringify({
        code: 'PACKAGE_MISSING',
        message:
          'Redis wake-ups (ONCELY_REDIS_URL) needs the package ioredis, which is not installed: install it with `npm install ioredis@5`',
      }),
      'sqlite ok',
    ]);
  });

  it('the CLI starts without them and names pg when a PostgreSQL URL is given', () => {
    const cli = join(dir, 'dist', 'cli', 'main.js');
    const help = spawnSync(process.execPath, [cli, '--help'], { cwd: dir, encoding: 'utf8' });
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toContain('serve');
    const migrate = spawnSync(
      process.execPath,
      [cli, 'migrate', '--database-url', 'postgres://127.0.0.1:1/none'],
      { cwd: dir, encoding: 'utf8', env: { ...process.env, ONCELY_DATABASE_URL: undefined } },
    );
    expect(migrate.status).not.toBe(0);
    expect(migrate.stderr).toContain('install it with `npm install pg`');
  });
});
