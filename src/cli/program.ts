import { heistCommand } from './heist.js';
import { drillCommand } from './drill.js';
import { Command, CommanderError } from 'commander';
import { isOncelyError } from '../errors/index.js';
import { approvalsCommand } from './approvals.js';
import { demoCommand } from './demo.js';
import { executionsCommand } from './executions.js';
import { keysCommand } from './keys.js';
import { migrateCommand } from './migrate.js';
import { runsCommand, usageCommand } from './runs.js';
import { serveCommand } from './serve.js';
import { workerCommand } from './worker.js';
import { workersCommand } from './workers.js';
import { workflowsCommand } from './workflows.js';
import { printable } from './table.js';
import { packageVersion } from '../util/package-version.js';

export function buildProgram(): Command {
  const program = new Command('oncely')
    .description(
      'A durable agent runtime: a tool call with a side effect takes effect once, or is recorded as unknown.',
    )
    .version(packageVersion())
    .showHelpAfterError()
    .exitOverride();
  program.addCommand(demoCommand());
  program.addCommand(migrateCommand());
  program.addCommand(workerCommand());
  program.addCommand(serveCommand());
  program.addCommand(keysCommand());
  program.addCommand(executionsCommand());
  program.addCommand(approvalsCommand());
  program.addCommand(runsCommand());
  program.addCommand(usageCommand());
  program.addCommand(workersCommand());
  program.addCommand(workflowsCommand());
  program.addCommand(drillCommand());
  program.addCommand(heistCommand());
  return program;
}

/** Runs the CLI and returns its exit code; errors are printed with their stable code and what to do. */
export async function runCli(argv: readonly string[]): Promise<number> {
  try {
    await buildProgram().parseAsync(argv);
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode;
    if (isOncelyError(error)) {
      // A message can carry what a client or an operator wrote: never let it drive the terminal.
      process.stderr.write(`oncely: ${error.code}: ${printable(error.message)}\n`);
      return 1;
    }
    process.stderr.write(
      `oncely: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    return 1;
  }
}
