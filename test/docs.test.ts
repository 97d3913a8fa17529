import { RESERVE } from '../src/store/ledger-sql.js';
import { execFile } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/errors/index.js';
import { CRASH_POINTS } from '../src/crash/index.js';
import { CALL_DECISION_TABLE, TRANSITIONS } from '../src/ledger/index.js';
import * as heard from '../src/runs/heard.js';
import { GOALS, LEVELS, describeTrick } from '../src/heist/game.js';

const read = (path: string): string => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');
const ROOT = fileURLToPath(new URL('..', import.meta.url));

/**
 * A TypeScript block of the docs, with what the HTML comment just before it says:
 * `<!-- snippet: given NAME, NAME; not run: REASON -->`. `given` names come from test/docs/given.ts
 * (real tools, a SQLite ledger and runtime, in-memory downstreams); `not run` says why it cannot run
 * here (an API key, a live server). Every block is typechecked; every block not marked runs, and its
 * `// → ` lines are its output.
 */
interface Snippet {
  readonly doc: string;
  /** The line of the doc where its code begins. */
  readonly line: number;
  readonly code: string;
  readonly given: readonly string[];
  readonly notRun: string | undefined;
  readonly output: readonly string[];
}

function snippetsOf(doc: string): Snippet[] {
  const lines = read(doc).split('\n');
  const snippets: Snippet[] = [];
  for (let i = 0; i < lines.length; i++) {
    // A fence may be indented (a block inside a list item): its code is, by as much.
    const indent = /^(\s*)```(ts|typescript|tsx)\s*$/.exec(lines[i]!)?.[1];
    if (indent === undefined) continue;
    const end = lines.findIndex((l, j) => j > i && /^\s*```\s*$/.test(l));
    const code = lines.slice(i + 1, end).map((l) => l.slice(indent.length));
    let before = i - 1;
    while (before > 0 && lines[before]!.trim() === '') before--;
    const comment = /^<!--\s*snippet:(.*?)-->\s*$/.exec(lines[before] ?? '')?.[1] ?? '';
    const directives = comment.split(';').map((d) => d.trim());
    const given =
      directives
        .find((d) => d.startsWith('given '))
        ?.slice(6)
        .split(',')
        .map((n) => n.trim()) ?? [];
    const notRun = directives
      .find((d) => d.startsWith('not run:'))
      ?.slice(8)
      .trim();
    const unknown = directives.filter(
      (d) => d !== '' && !d.startsWith('given ') && !d.startsWith('not run:'),
    );
    if (unknown.length > 0)
      throw new Error(`${doc}:${i}: unknown snippet directive ${JSON.stringify(unknown)}`);
    const output = code.flatMap((l) => /^\/\/ → (.*)$/.exec(l)?.[1] ?? []);
    snippets.push({ doc, line: i + 2, code: code.join('\n'), given, notRun, output });
    i = end;
  }
  return snippets;
}

/** Runs an example as the docs say to (`npx tsx FILE`), in a process of its own; its output. */
async function runExample(file: string): Promise<string> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', file], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  return stdout;
}

/** The snippets are compiled against the built package, as a user's project sees it. */
function assertBuilt(): void {
  if (!existsSync(join(ROOT, 'dist', 'index.d.ts'))) {
    throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
  }
}

const DOCS = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

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

  it('docs/ledger.md shows the decision table row by row, in the order the code matches it', () => {
    const doc = read('docs/ledger.md');
    const section = doc.slice(
      doc.indexOf('## What happens to a call'),
      doc.indexOf('**An attempt may still land**'),
    );
    const actions = [...section.matchAll(/^\|[^|\n]+\|\s*`([a-z_]+)`\s*\|$/gm)].map((m) => m[1]);
    expect(actions).toEqual(CALL_DECISION_TABLE.map((row) => row.action));
  });

  it('docs/ledger.md shows the reservation statement the PostgreSQL store runs', () => {
    expect(read('docs/ledger.md')).toContain(RESERVE.postgres);
  });

  it.concurrent("the README's example is examples/quickstart.ts, and it runs as written", async () => {
    const example = read('examples/quickstart.ts');
    expect(read('README.md')).toContain(example);
    const output = await runExample('examples/quickstart.ts');
    expect(output.trim()).toBe('completed completed ledger 1');
  });

  it.concurrent('docs/workflows.md links examples/workflow.ts, and it runs as written', async () => {
    expect(read('docs/workflows.md')).toContain('examples/workflow.ts');
    const output = await runExample('examples/workflow.ts');
    expect(output.trim().split('\n')).toEqual([
      'completed | Order ord_7 refunded and the customer told. | review-ord_7.check.1 review-ord_7.refund.1 review-ord_7.notify.1 review-ord_7.summary.1',
      'refunds 1 | emails 1 | retry on send_email: WORKFLOW_DEFINITION_INVALID',
    ]);
  });

  it.concurrent('docs/frameworks.md links examples/ai-sdk-loop.ts, and it runs as written', async () => {
    expect(read('docs/frameworks.md')).toContain('examples/ai-sdk-loop.ts');
    const output = await runExample('examples/ai-sdk-loop.ts');
    expect(output.trim()).toBe('Refunded $25. | Refunded $25. | model asked 2 times | credits 1');
  });

  it.concurrent('docs/frameworks.md links examples/mcp-tools.ts, and it runs as written', async () => {
    expect(read('docs/frameworks.md')).toContain('examples/mcp-tools.ts');
    const output = await runExample('examples/mcp-tools.ts');
    expect(output.trim()).toBe('external completed ledger 1');
  });

  it.concurrent(
    'docs/frameworks.md links examples/openai-agents-run.ts, and it runs as written',
    async () => {
      expect(read('docs/frameworks.md')).toContain('examples/openai-agents-run.ts');
      const output = await runExample('examples/openai-agents-run.ts');
      expect(output.trim()).toBe('Refunded $25. | Refunded $25. | model asked 2 times | credits 1');
    },
  );

  it('docs/runs.md shows exactly what the model hears, as the code makes it', () => {
    const doc = read('docs/runs.md');
    const samples = [
      heard.heardCompleted({
        result: { creditId: 'cr_81f2' },
        resultReference: null,
        settledBy: { kind: 'runtime', id: 'web-1:4242' },
      }),
      heard.heardCompleted(
        {
          result: null,
          resultReference: 're_3Nf81f2',
          settledBy: { kind: 'operator', id: 'ops-ana' },
        },
        'refund re_3Nf81f2 is in the Stripe dashboard',
      ),
      heard.heardTookEffect(
        {
          settledBy: { kind: 'operator', id: 'ops-ana' },
          error: { code: 'RESOLVED_NOT_TAKEN', message: 'nothing in the billing console yet' },
        },
        { result: { creditId: 'cr_81f2' }, resultReference: 'cr_81f2' },
      ),
      heard.heardReplayed({ creditId: 'cr_81f2' }),
      heard.heardNotAttempted('the billing token expired; refresh it'),
      heard.heardDidNotTakeEffect('no credit under this key in the billing console', {
        kind: 'operator',
        id: 'ops-ana',
      }),
      heard.heardCompensated({ creditId: 'cr_81f2' }, 'credited the wrong account'),
      heard.heardRejected('over the refund limit for this customer'),
      heard.heardInvalidCall('there is no tool named "refund"; the tools are: issue_credit, lookup_order'),
      heard.heardReadFailed('read failed after 3 tries: connect ECONNREFUSED 127.0.0.1:8080'),
    ];
    for (const sample of samples) {
      expect(doc).toContain(
        `${sample.kind.padEnd(20)} ${JSON.stringify({ type: sample.type, value: sample.value })}`,
      );
    }
  });

  it('every entry the package exports is mapped to its source for the type checker, and to the built file', () => {
    const manifest = JSON.parse(read('package.json')) as { exports: Record<string, { import?: string }> };
    const tsconfig = JSON.parse(read('tsconfig.json')) as {
      compilerOptions: { paths: Record<string, string[]> };
    };
    const entries = Object.entries(manifest.exports).filter(([subpath]) => subpath !== './package.json');
    const mapped = Object.fromEntries(
      entries.map(([subpath, target]) => [
        subpath === '.' ? 'oncely' : `oncely/${subpath.slice(2)}`,
        [target.import?.replace(/^\.\/dist\//, './src/').replace(/\.js$/, '.ts')],
      ]),
    );
    expect(tsconfig.compilerOptions.paths).toEqual(mapped);
  });

  it('docs/drills.md lists exactly the crash points of the code', () => {
    const rows = [...read('docs/drills.md').matchAll(/^\|\s*`([a-z]+\.[a-z-]+)`\s*\|/gm)].map((m) => m[1]);
    expect(rows).toEqual([...CRASH_POINTS]);
  });

  it('docs/heist.md lists exactly the levels of the game: number, title, goal and trick', () => {
    const rows = [
      ...read('docs/heist.md').matchAll(/^\| (\d+)\s+\| ([^|]+?)\s+\| ([^|]+?)\s+\| ([^|]+?)\s+\|/gm),
    ].map((m) => [Number(m[1]), m[2], m[3], m[4]]);
    expect(rows).toEqual(
      LEVELS.map((l) => [
        l.number,
        l.title,
        GOALS[l.goal],
        describeTrick(l.tricks[0] ?? 'timeout-after-apply').name,
      ]),
    );
  });

  it('every TypeScript snippet of the docs compiles against the built package, and runs unless it says why not', async () => {
    assertBuilt();
    const snippets = DOCS.flatMap(snippetsOf);
    expect(snippets.length).toBeGreaterThan(10);
    // Inside the package, so `oncely` resolves to itself (package.json exports: dist's types and code).
    mkdirSync(join(ROOT, '.scratch'), { recursive: true });
    const dir = mkdtempSync(join(ROOT, '.scratch', 'docs-snippets-'));
    try {
      cpSync(join(ROOT, 'test', 'docs', 'given.ts'), join(dir, 'given.ts'));
      const files = snippets.map((s, i) => {
        const name = `${s.doc.replace(/[/.]/g, '_')}_${s.line}_${i}`;
        const header = s.given.length === 0 ? '' : `import { ${s.given.join(', ')} } from './given.js';`;
        // The header goes on the snippet's first line, so a diagnostic's line is the doc's.
        const code = `${header}${header === '' ? '' : ' '}${s.code}\nexport {};\n`;
        writeFileSync(join(dir, `${name}.ts`), code);
        return { snippet: s, name };
      });
      // One program for every snippet: strict, as a user's project on Node with ES modules.
      const program = ts.createProgram(
        [join(dir, 'given.ts'), ...files.map((f) => join(dir, `${f.name}.ts`))],
        {
          module: ts.ModuleKind.NodeNext,
          moduleResolution: ts.ModuleResolutionKind.NodeNext,
          target: ts.ScriptTarget.ES2022,
          lib: ['lib.es2023.d.ts'],
          types: ['node'],
          strict: true,
          skipLibCheck: true,
          outDir: join(dir, 'out'),
          rootDir: dir,
        },
      );
      const emitted = program.emit();
      const problems = [...ts.getPreEmitDiagnostics(program), ...emitted.diagnostics].map((d) => {
        const where = d.file?.getLineAndCharacterOfPosition(d.start ?? 0);
        const file = files.find((f) => d.file?.fileName.endsWith(`/${f.name}.ts`))?.snippet;
        const place = file === undefined ? d.file?.fileName : `${file.doc}:${file.line + (where?.line ?? 0)}`;
        return `${place}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
      });
      expect(problems).toEqual([]);

      // Each runnable snippet in a process of its own, in a scratch directory (its SQLite files there).
      const run = promisify(execFile);
      const results = await Promise.all(
        files
          .filter((f) => f.snippet.notRun === undefined)
          .map(async ({ snippet, name }) => {
            const script =
              `await import('./out/${name}.js');` +
              (snippet.given.length === 0 ? '' : `await (await import('./out/given.js')).closeGiven();`) +
              'process.exit(0);';
            const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], {
              cwd: dir,
              timeout: 30_000,
            }).catch((error: unknown) => {
              throw new Error(`${snippet.doc}:${snippet.line}: the snippet failed: ${String(error)}`);
            });
            const printed = stdout.trim() === '' ? [] : stdout.trim().split('\n');
            return {
              at: `${snippet.doc}:${snippet.line}`,
              printed: snippet.output.length === 0 ? [] : printed,
              expected: snippet.output,
            };
          }),
      );
      for (const r of results)
        expect({ at: r.at, printed: r.printed }).toEqual({ at: r.at, printed: r.expected });
      // Not run: each says why.
      for (const s of snippets.filter((x) => x.notRun !== undefined))
        expect(s.notRun, `${s.doc}:${s.line}`).not.toBe('');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it("a CommonJS TypeScript project with the README's tsconfig lines compiles against oncely's types and runs", async () => {
    assertBuilt();
    const block = /<!-- tsconfig: commonjs -->\s*```json\n([\s\S]*?)```/.exec(read('README.md'))?.[1];
    expect(block).toBeDefined();
    const { compilerOptions } = JSON.parse(block!) as { compilerOptions: Record<string, unknown> };
    mkdirSync(join(ROOT, '.scratch'), { recursive: true });
    const dir = mkdtempSync(join(ROOT, '.scratch', 'docs-cjs-'));
    try {
      // A project of its own (type commonjs) with oncely installed in its node_modules.
      writeFileSync(
        join(dir, 'package.json'),
        JSON.stringify({ name: 'cjs-app', private: true, type: 'commonjs' }),
      );
      mkdirSync(join(dir, 'node_modules'));
      symlinkSync(ROOT, join(dir, 'node_modules', 'oncely'), 'dir');
      writeFileSync(
        join(dir, 'main.ts'),
        [
          "import { z } from 'zod';",
          "import { defineTool, executeToolCall, external, openLedger } from 'oncely';",
          "import { durableLoop } from 'oncely/ai-sdk';",
          'const tool = defineTool({',
          "  name: 'issue_credit', description: 'Credit', input: z.object({ accountId: z.string() }),",
          '  effect: external(), execute: (_args, ctx) => ({ key: ctx.idempotencyKey }),',
          '});',
          'async function main(): Promise<void> {',
          "  const ledger = await openLedger('sqlite:cjs.db');",
          "  const call = { tenantId: 'acme', runId: 'run_1', toolCallId: 'call_1' };",
          "  const outcome = await executeToolCall(ledger, tool, { accountId: 'acct_7' }, call);",
          '  console.log(outcome.status, typeof durableLoop);',
          '  await ledger.close();',
          '}',
          'void main();',
        ].join('\n'),
      );
      const converted = ts.convertCompilerOptionsFromJson(compilerOptions, dir);
      expect(converted.errors).toEqual([]);
      const program = ts.createProgram([join(dir, 'main.ts')], {
        ...converted.options,
        strict: true,
        skipLibCheck: true,
        types: ['node'],
        typeRoots: [join(ROOT, 'node_modules', '@types')],
        outDir: join(dir, 'out'),
      });
      const emitted = program.emit();
      const problems = [...ts.getPreEmitDiagnostics(program), ...emitted.diagnostics].map((d) =>
        ts.flattenDiagnosticMessageText(d.messageText, '\n'),
      );
      expect(problems).toEqual([]);
      expect(readFileSync(join(dir, 'out', 'main.js'), 'utf8')).toContain('require("oncely")');
      const { stdout } = await promisify(execFile)(process.execPath, ['out/main.js'], {
        cwd: dir,
        timeout: 30_000,
      });
      expect(stdout.trim()).toBe('completed function');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
