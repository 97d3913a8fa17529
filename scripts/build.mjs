// Compiles src/ to dist/ and copies the SQL migrations beside the code that reads them.
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, readdirSync, rmSync, chmodSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const tsc = require.resolve('typescript/bin/tsc');

rmSync(join(root, 'dist'), { recursive: true, force: true });
execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit' });

// The store's migrations, and the receiver's key store's own.
for (const area of ['store', 'receiver']) {
  for (const dialect of ['sqlite', 'postgres']) {
    const from = join(root, 'src', area, dialect, 'migrations');
    if (!existsSync(from)) continue;
    const to = join(root, 'dist', area, dialect, 'migrations');
    for (const file of readdirSync(from).filter((f) => f.endsWith('.sql'))) {
      cpSync(join(from, file), join(to, file));
    }
  }
}
// The operator console: its TypeScript compiled for browsers, its page and stylesheet beside it, and
// a manifest of what the server may serve.
execFileSync(process.execPath, [tsc, '-p', join(root, 'console', 'tsconfig.json')], { stdio: 'inherit' });
const consoleDir = join(root, 'dist', 'console');
for (const file of ['index.html', 'style.css', 'favicon.svg'])
  cpSync(join(root, 'console', file), join(consoleDir, file));
writeFileSync(
  join(consoleDir, 'assets.json'),
  `${JSON.stringify(
    readdirSync(consoleDir)
      .filter((f) => /\.(html|css|js|svg)$/.test(f))
      .sort(),
  )}\n`,
);

const bin = join(root, 'dist', 'cli', 'main.js');
if (existsSync(bin)) chmodSync(bin, 0o755);
