import { RESERVE } from '../src/store/ledger-sql.js';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/errors/index.js';
import { CRASH_POINTS } from '../src/crash/index.js';
import { CALL_DECISION_TABLE, TRANSITIONS } from '../src/ledger/index.js';
import * as heard from '../src/runs/heard.js';
import { GOALS, LEVELS, describeTrick } from '../src/heist/game.js';

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

  it("the README's example is examples/quickstart.ts, and it runs as written", () => {
    const example = read('examples/quickstart.ts');
    expect(read('README.md')).toContain(example);
    const output = execFileSync(process.execPath, ['--import', 'tsx', 'examples/quickstart.ts'], {
      cwd: new URL('..', import.meta.url),
      encoding: 'utf8',
    });
    expect(output.trim()).toBe('completed completed ledger 1');
  });

  it('docs/workflows.md links examples/workflow.ts, and it runs as written', () => {
    expect(read('docs/workflows.md')).toContain('examples/workflow.ts');
    const output = execFileSync(process.execPath, ['--import', 'tsx', 'examples/workflow.ts'], {
      cwd: new URL('..', import.meta.url),
      encoding: 'utf8',
    });
    expect(output.trim().split('\n')).toEqual([
      'completed | Order ord_7 refunded and the customer told. | review-ord_7.check.1 review-ord_7.refund.1 review-ord_7.notify.1 review-ord_7.summary.1',
      'refunds 1 | emails 1 | retry on send_email: WORKFLOW_DEFINITION_INVALID',
    ]);
  });

  it('docs/frameworks.md links examples/ai-sdk-loop.ts, and it runs as written', () => {
    expect(read('docs/frameworks.md')).toContain('examples/ai-sdk-loop.ts');
    const output = execFileSync(process.execPath, ['--import', 'tsx', 'examples/ai-sdk-loop.ts'], {
      cwd: new URL('..', import.meta.url),
      encoding: 'utf8',
    });
    expect(output.trim()).toBe('Refunded $25. | Refunded $25. | model asked 2 times | credits 1');
  });

  it('docs/frameworks.md links examples/mcp-tools.ts, and it runs as written', () => {
    expect(read('docs/frameworks.md')).toContain('examples/mcp-tools.ts');
    const output = execFileSync(process.execPath, ['--import', 'tsx', 'examples/mcp-tools.ts'], {
      cwd: new URL('..', import.meta.url),
      encoding: 'utf8',
    });
    expect(output.trim()).toBe('external completed ledger 1');
  });

  it('docs/frameworks.md links examples/openai-agents-run.ts, and it runs as written', () => {
    expect(read('docs/frameworks.md')).toContain('examples/openai-agents-run.ts');
    const output = execFileSync(process.execPath, ['--import', 'tsx', 'examples/openai-agents-run.ts'], {
      cwd: new URL('..', import.meta.url),
      encoding: 'utf8',
    });
    expect(output.trim()).toBe('Refunded $25. | Refunded $25. | model asked 2 times | credits 1');
  });

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
});
