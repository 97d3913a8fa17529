// Measures what `npm install oncely` costs a user: packs this checkout (build it first), installs the
// tarball into an empty project beside `ai` and `zod` (and any extra packages named on the command
// line, e.g. `@ai-sdk/openai pg`, or `ai@6` for AI SDK 6 instead of the newest), and prints the packages added, the size of node_modules with and
// without the native SQLite build, the tarball's size and the install's wall time.
//
//   npm run build && node scripts/install-size.mjs [extra packages...]
//
// The time depends on the network and on npm's cache (~/.npm): run it twice and take the second for
// a warm cache. Set ONCELY_TARBALL to measure a tarball packed elsewhere (another commit), and
// ONCELY_INSTALL_IGNORE_SCRIPTS=1 to time npm without the native build (better-sqlite3 is then not
// compiled, and its size is that of its sources).
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const run = (args, cwd) =>
  execFileSync(npm, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });

/** Bytes on disk under a path (files' apparent sizes; links not followed). */
function bytes(path) {
  const s = statSync(path, { throwIfNoEntry: false });
  if (s === undefined || s.isSymbolicLink()) return 0;
  if (!s.isDirectory()) return s.size;
  let total = 0;
  for (const entry of readdirSync(path)) total += bytes(join(path, entry));
  return total;
}

const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;
const dir = mkdtempSync(join(tmpdir(), 'oncely-install-'));
try {
  let tarball = process.env.ONCELY_TARBALL;
  if (tarball === undefined) {
    const [packed] = JSON.parse(run(['pack', '--json', '--pack-destination', dir], root));
    tarball = join(dir, packed.filename);
  }
  const project = join(dir, 'consumer');
  mkdirSync(project);
  run(['init', '-y'], project);
  const started = performance.now();
  const extra = process.argv.slice(2);
  // `ai@6` or `zod@3` on the command line takes the place of the newest.
  const defaults = ['ai', 'zod'].filter((name) => !extra.some((p) => p.startsWith(`${name}@`)));
  // ONCELY_INSTALL_IGNORE_SCRIPTS=1: no native build, so the time is npm's own (resolve, fetch, unpack).
  const scripts = process.env.ONCELY_INSTALL_IGNORE_SCRIPTS === '1' ? ['--ignore-scripts'] : [];
  const out = run(
    ['install', tarball, ...defaults, ...extra, ...scripts, '--no-audit', '--no-fund'],
    project,
  );
  const seconds = (performance.now() - started) / 1000;
  const modules = join(project, 'node_modules');
  const total = bytes(modules);
  // The native SQLite build: better-sqlite3 with what compiles or fetches it (bindings, prebuild-install's tree).
  const sqlite = bytes(join(modules, 'better-sqlite3'));
  const report = {
    packages: Number(/added (\d+) packages?/.exec(out)?.[1] ?? NaN),
    node_modules: mb(total),
    better_sqlite3: mb(sqlite),
    without_better_sqlite3: mb(total - sqlite),
    tarball: mb(bytes(tarball)),
    install_seconds: Number(seconds.toFixed(1)),
    ai: JSON.parse(readFileSync(join(modules, 'ai', 'package.json'), 'utf8')).version,
    extra,
  };
  console.log(JSON.stringify(report, null, 2));
  if (process.env.ONCELY_INSTALL_LIST === '1') {
    const sizes = readdirSync(modules).flatMap((name) =>
      name.startsWith('@')
        ? readdirSync(join(modules, name)).map((sub) => `${name}/${sub}`)
        : name.startsWith('.')
          ? []
          : [name],
    );
    const rows = sizes.map((name) => [name, bytes(join(modules, name))]).sort((a, b) => b[1] - a[1]);
    for (const [name, size] of rows.slice(0, 30)) console.log(`${mb(size).padStart(9)}  ${name}`);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
