import { Command, Option } from 'commander';
import { EXECUTION_FILTERS } from '../api/schemas/tool-executions.js';
import { ApiClient, type ApiFlags } from '../api/client.js';
import type {
  Compensation,
  HookAsked,
  Incidents,
  Page,
  ResolvedTogether,
  ToolExecution,
  ToolExecutionWithHistory,
} from '../api/client-types.js';
import { moreHint, parseJsonFlag, withApiFlags } from './operator-flags.js';
import { age, clip, output, renderTable } from './table.js';
import { positiveInt } from './worker.js';

const path = (key: string): string => `/v1/tool-executions/${encodeURIComponent(key)}`;

/** `oncely executions list|incidents|show|resolve|reconcile|compensate`: find unknown calls and settle them. */
export function executionsCommand(): Command {
  const command = new Command('executions').description(
    'find tool calls whose outcome is unknown, and settle them (through the API)',
  );
  command.addCommand(listCommand());
  command.addCommand(incidentsCommand());
  command.addCommand(showCommand());
  command.addCommand(resolveCommand());
  command.addCommand(reconcileCommand());
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
    .description(
      'settle unknown calls: they took effect (completed) or they did not (failed); several keys are settled ' +
        'together with one reason, each by compare-and-set',
    )
    .argument('<keys...>', 'the idempotency keys, <run_id>:<tool_call_id> (1-100)')
    .addOption(
      new Option('--status <status>', 'what you found downstream')
        .choices(['completed', 'failed'])
        .makeOptionMandatory(),
    )
    .requiredOption('--reason <text>', 'what you checked and what you found (recorded in each history)')
    .option('--result <json>', 'with completed: the result the tool would have returned, as JSON')
    .option('--result-reference <ref>', 'with completed: the downstream reference (a receipt id)')
    .option(
      '--force',
      'settle a started call even though its attempt may still be running (recorded as forced)',
    )
    .action(
      async (
        keys: string[],
        flags: ApiFlags & {
          status: string;
          reason: string;
          result?: string;
          resultReference?: string;
          force?: boolean;
        },
      ) => {
        const body = {
          status: flags.status,
          reason: flags.reason,
          ...(flags.result === undefined ? {} : { result: parseJsonFlag('--result', flags.result) }),
          ...(flags.resultReference === undefined ? {} : { result_reference: flags.resultReference }),
          ...(flags.force === true ? { force: true } : {}),
        };
        const client = ApiClient.fromFlags(flags);
        const [only] = keys;
        if (keys.length === 1 && only !== undefined) {
          const record = await client.post<ToolExecution>(`${path(only)}/resolve`, body);
          output(flags.json, record, () => `${record.idempotency_key} is now ${record.status}\n`);
          return;
        }
        const done = await client.post<ResolvedTogether>('/v1/tool-executions/resolve', { keys, ...body });
        output(flags.json, done, () => describeTogether(done));
      },
    );
}

function describeTogether(done: ResolvedTogether): string {
  const lines = [
    `settled ${done.settled.length} together (${done.together}):`,
    ...done.settled.map((r) => `  ${r.idempotency_key} is now ${r.status}`),
  ];
  if (done.moved_on.length > 0) {
    lines.push(`left as they stand (${done.moved_on.length}):`);
    lines.push(
      ...done.moved_on.map((m) => `  ${m.idempotency_key}: ${m.code} (${m.record?.status ?? 'no record'})`),
    );
  }
  return `${lines.join('\n')}\n`;
}

function reconcileCommand(): Command {
  return withApiFlags(new Command('reconcile'))
    .description("ask an unknown call's reconcile hook now, and record what it says")
    .argument('<key>', 'the idempotency key, <run_id>:<tool_call_id>')
    .action(async (key: string, flags: ApiFlags) => {
      const asked = await ApiClient.fromFlags(flags).post<HookAsked>(`${path(key)}/reconcile`, {});
      output(flags.json, asked, () => {
        const said = asked.said;
        const words =
          said === null
            ? 'its answer was not recorded'
            : said.to === null
              ? `it could not tell (${said.reason ?? 'no reason'})`
              : `it found it ${said.to} (${said.reason ?? 'no reason'})`;
        return `asked the reconcile hook of ${key}: ${words}; the call is ${asked.record.status}\n`;
      });
    });
}

function incidentsCommand(): Command {
  return withApiFlags(new Command('incidents'))
    .description(
      'unknown calls grouped by tool and downstream; --search by key, account or any argument value',
    )
    .option(
      '--search <words>',
      'words every call shown matches (key, run, tool, downstream, argument values)',
    )
    .option('--tool <name>', 'only this tool')
    .action(async (flags: ApiFlags & { search?: string; tool?: string }) => {
      const found = await ApiClient.fromFlags(flags).get<Incidents>('/v1/incidents', {
        q: flags.search,
        tool: flags.tool,
      });
      output(flags.json, found, () => {
        if (found.matched === 0) return `no unknown calls${found.q === null ? '' : ` match "${found.q}"`}\n`;
        const parts = [
          `${found.matched} of ${found.unknown} unknown calls${found.capped ? ' (1000 read)' : ''}\n`,
        ];
        for (const g of found.groups) {
          parts.push(
            `\n${g.tool_name} · ${g.downstream ?? 'downstream not declared'} (${g.count})${g.can_ask_hook ? '' : ' · no hook here'}\n`,
          );
          parts.push(
            renderTable(
              ['KEY', 'STATUS', 'WAITING', 'ARGS'],
              g.calls.map((r) => [
                r.idempotency_key,
                r.status,
                age(r.attempt_started_at),
                clip(JSON.stringify(r.args), 60),
              ]),
            ),
          );
        }
        return parts.join('');
      });
    });
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
