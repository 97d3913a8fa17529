import { Command, Option } from 'commander';
import { EXECUTION_FILTERS } from '../api/schemas/tool-executions.js';
import { ApiClient, type ApiFlags } from '../api/client.js';
import type { Compensation, Page, ToolExecution, ToolExecutionWithHistory } from '../api/client-types.js';
import { moreHint, parseJsonFlag, withApiFlags } from './operator-flags.js';
import { age, clip, output, renderTable } from './table.js';
import { positiveInt } from './worker.js';

const path = (key: string): string => `/v1/tool-executions/${encodeURIComponent(key)}`;

/** `oncely executions list|show|resolve|compensate`: find unknown calls and settle them. */
export function executionsCommand(): Command {
  const command = new Command('executions').description(
    'find tool calls whose outcome is unknown, and settle them (through the API)',
  );
  command.addCommand(listCommand());
  command.addCommand(showCommand());
  command.addCommand(resolveCommand());
  command.addCommand(compensateCommand());
  return command;
}

function listCommand(): Command {
  return withApiFlags(new Command('list'))
    .description("the tenant's unknown calls, longest waiting first (or --status)")
    .addOption(
      new Option(
        '--status <status>',
        'unknown (default), all, conflict (contradicted after settling), or one status',
      ).choices(EXECUTION_FILTERS),
    )
    .option('--run <run_id>', 'only this run')
    .option('--tool <name>', 'only this tool')
    .option('--limit <n>', 'items per page (1-500)', positiveInt('--limit'))
    .option('--cursor <cursor>', 'the next page, as printed after the last one')
    .action(
      async (
        flags: ApiFlags & { status?: string; run?: string; tool?: string; limit?: number; cursor?: string },
      ) => {
        const page = await ApiClient.fromFlags(flags).get<Page<ToolExecution>>('/v1/tool-executions', {
          status: flags.status,
          run_id: flags.run,
          tool: flags.tool,
          limit: flags.limit,
          cursor: flags.cursor,
        });
        output(flags.json, page, () => {
          if (page.items.length === 0) return `no ${flags.status ?? 'unknown'} tool calls\n`;
          const rows = page.items.map((r) => [
            r.idempotency_key,
            r.tool_name,
            r.status,
            age(r.attempt_started_at),
            clip(r.error?.message ?? r.result_reference ?? null, 50),
          ]);
          return (
            renderTable(['KEY', 'TOOL', 'STATUS', 'WAITING', 'DETAIL'], rows) +
            moreHint('executions list', page)
          );
        });
      },
    );
}

function showCommand(): Command {
  return withApiFlags(new Command('show'))
    .description('one call and its whole history')
    .argument('<key>', 'the idempotency key, <run_id>:<tool_call_id>')
    .action(async (key: string, flags: ApiFlags) => {
      const found = await ApiClient.fromFlags(flags).get<ToolExecutionWithHistory>(path(key));
      output(flags.json, found, () => describeExecution(found));
    });
}

function resolveCommand(): Command {
  return withApiFlags(new Command('resolve'))
    .description('settle an unknown call: it took effect (completed) or it did not (failed)')
    .argument('<key>', 'the idempotency key, <run_id>:<tool_call_id>')
    .addOption(
      new Option('--status <status>', 'what you found downstream')
        .choices(['completed', 'failed'])
        .makeOptionMandatory(),
    )
    .requiredOption('--reason <text>', 'what you checked and what you found (recorded in the history)')
    .option('--result <json>', 'with completed: the result the tool would have returned, as JSON')
    .option('--result-reference <ref>', 'with completed: the downstream reference (a receipt id)')
    .option(
      '--force',
      'settle a started call even though its attempt may still be running (recorded as forced)',
    )
    .action(
      async (
        key: string,
        flags: ApiFlags & {
          status: string;
          reason: string;
          result?: string;
          resultReference?: string;
          force?: boolean;
        },
      ) => {
        const record = await ApiClient.fromFlags(flags).post<ToolExecution>(`${path(key)}/resolve`, {
          status: flags.status,
          reason: flags.reason,
          ...(flags.result === undefined ? {} : { result: parseJsonFlag('--result', flags.result) }),
          ...(flags.resultReference === undefined ? {} : { result_reference: flags.resultReference }),
          ...(flags.force === true ? { force: true } : {}),
        });
        output(flags.json, record, () => `${record.idempotency_key} is now ${record.status}\n`);
      },
    );
}

function compensateCommand(): Command {
  return withApiFlags(new Command('compensate'))
    .description("undo a completed call with its tool's compensation hook (runs once, however often asked)")
    .argument('<key>', 'the idempotency key, <run_id>:<tool_call_id>')
    .requiredOption('--reason <text>', 'why it must be undone (recorded in the history)')
    .action(async (key: string, flags: ApiFlags & { reason: string }) => {
      const outcome = await ApiClient.fromFlags(flags).post<Compensation>(`${path(key)}/compensate`, {
        reason: flags.reason,
      });
      output(flags.json, outcome, () => {
        const c = outcome.compensation;
        if (outcome.status === 'compensated')
          return `${key} is compensated (${c.idempotency_key} completed)\n`;
        if (outcome.status === 'failed') {
          return `the compensation hook refused before acting (${c.error?.message ?? 'no reason'}); try again later\n`;
        }
        const settle = `\`oncely executions resolve ${c.idempotency_key} --status completed|failed --reason ...\``;
        if (outcome.status === 'in_progress') {
          return (
            `the compensation ${c.idempotency_key} is in flight, or may still land (started ${c.attempt_started_at}); ` +
            `it is never run twice. Look again with \`oncely executions show ${c.idempotency_key}\`; once its ` +
            `timeout has passed and it is still unsettled, its process died: ${settle}\n`
          );
        }
        return `the compensation's outcome is unknown: settle it with ${settle}\n`;
      });
    });
}

function describeExecution({ record: r, history }: ToolExecutionWithHistory): string {
  const lines = [
    `${r.idempotency_key}  ${r.tool_name} (${r.effect})  ${r.status}  attempt ${r.attempt}`,
    `args:      ${JSON.stringify(r.args)}`,
    `result:    ${r.result === null ? '-' : JSON.stringify(r.result)}`,
    `reference: ${r.result_reference ?? '-'}`,
    `error:     ${r.error === null ? '-' : `${r.error.code}: ${r.error.message}`}`,
    `settled:   ${r.settled_by === null ? '-' : `${r.settled_at ?? ''} by ${r.settled_by.kind} ${r.settled_by.id}`}`,
    ...(r.conflict_at === null
      ? []
      : [
          `CONFLICT:  since ${r.conflict_at} a real outcome contradicts this record; check the downstream system`,
        ]),
    '',
  ];
  const rows = history.map((e) => [
    e.at,
    e.kind,
    `${e.from ?? '-'} -> ${e.to ?? '-'}`,
    `${e.actor.kind}:${e.actor.id}`,
    clip(e.reason, 60),
  ]);
  return lines.join('\n') + '\n' + renderTable(['AT', 'KIND', 'MOVE', 'BY', 'REASON'], rows);
}
