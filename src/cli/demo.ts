import { Command, InvalidArgumentError } from 'commander';
import { runDemo } from '../demo/run-demo.js';

interface DemoFlags {
  db?: string;
  scenario?: number;
  json?: boolean;
}

function scenarioNumber(value: string): number {
  const n = Number(value);
  if (![1, 2, 3, 4].includes(n)) throw new InvalidArgumentError('--scenario is 1, 2, 3 or 4');
  return n;
}

export function demoCommand(): Command {
  return new Command('demo')
    .description(
      'four reconciliation scenarios against a fake billing service: no API key, network or database needed',
    )
    .option('--db <path>', 'keep the SQLite database at this path (default: a temporary directory)')
    .option('--scenario <n>', 'run one scenario: 1, 2, 3 or 4', scenarioNumber)
    .option('--json', 'print the facts as JSON')
    .action(async (flags: DemoFlags) => {
      const write = (text: string): void => void process.stdout.write(`${text}\n`);
      const report = await runDemo({
        ...(flags.db === undefined ? {} : { db: flags.db }),
        ...(flags.scenario === undefined ? {} : { scenario: flags.scenario }),
        ...(flags.json === true ? {} : { say: write }),
      });
      if (flags.json === true) write(JSON.stringify(report, null, 2));
      if (report.ok) return;
      const failed = report.scenarios.flatMap((s) =>
        s.facts.filter((f) => !f.ok).map((f) => `scenario ${s.number}: ${f.what}`),
      );
      process.stderr.write(
        `oncely demo: not as promised:\n${[...(report.error === undefined ? [] : [report.error]), ...failed].map((l) => `  - ${l}`).join('\n')}\n`,
      );
      process.exitCode = 1;
    });
}
