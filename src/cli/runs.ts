import { Command, Option } from 'commander';
import { RUN_STATUSES } from '../run-state/index.js';
import { ApiClient, type ApiFlags } from '../api/client.js';
import type { Page, Run } from '../api/client-types.js';
import { moreHint, withApiFlags } from './operator-flags.js';
import { age, clip, output, renderTable } from './table.js';
import { positiveInt } from './worker.js';

const path = (runId: string): string => `/v1/runs/${encodeURIComponent(runId)}`;

/** `oncely runs list|show|cancel|retry`: look at runs, stop one, re-drive a failed one. */
export function runsCommand(): Command {
  const command = new Command('runs').description(
    'look at runs, cancel one, or retry a failed one (through the API)',
  );
  command.addCommand(listCommand());
  command.addCommand(showCommand());
  command.addCommand(cancelCommand());
  command.addCommand(retryCommand());
  return command;
}

function retryCommand(): Command {
  return withApiFlags(new Command('retry'))
    .description(
      're-drive a failed run from its last checkpoint; completed calls replay, nothing that took effect runs again',
    )
    .argument('<run_id>')
    .requiredOption('--reason <text>', 'why it may go on now (recorded with the run)')
    .action(async (runId: string, flags: ApiFlags & { reason: string }) => {
      const run = await ApiClient.fromFlags(flags).post<Run>(`${path(runId)}/retry`, {
        reason: flags.reason,
      });
      output(
        flags.json,
        run,
        () => `${run.run_id} is ${run.status}: a worker drives it from its last checkpoint\n`,
      );
    });
}

function listCommand(): Command {
  return withApiFlags(new Command('list'))
    .description("the tenant's runs, oldest first")
    .addOption(new Option('--status <status>', 'only this status').choices(RUN_STATUSES))
    .option('--agent <name>', 'only this agent')
    .option('--limit <n>', 'items per page (1-500)', positiveInt('--limit'))
    .option('--cursor <cursor>', 'the next page, as printed after the last one')
    .action(
      async (flags: ApiFlags & { status?: string; agent?: string; limit?: number; cursor?: string }) => {
        const page = await ApiClient.fromFlags(flags).get<Page<Run>>('/v1/runs', {
          status: flags.status,
          agent: flags.agent,
          limit: flags.limit,
          cursor: flags.cursor,
        });
        output(flags.json, page, () => {
          if (page.items.length === 0) return 'no runs\n';
          const rows = page.items.map((r) => [
            r.run_id,
            r.agent,
            r.status,
            String(r.step),
            age(r.updated_at),
            clip(r.status_reason, 50),
          ]);
          return (
            renderTable(['RUN', 'AGENT', 'STATUS', 'STEP', 'UPDATED', 'REASON'], rows) +
            moreHint('runs list', page)
          );
        });
      },
    );
}

function showCommand(): Command {
  return withApiFlags(new Command('show'))
    .description('one run')
    .argument('<run_id>')
    .action(async (runId: string, flags: ApiFlags) => {
      const run = await ApiClient.fromFlags(flags).get<Run>(path(runId));
      output(flags.json, run, () => describeRun(run));
    });
}

function cancelCommand(): Command {
  return withApiFlags(new Command('cancel'))
    .description('cancel a run that has not ended; nothing it did is undone')
    .argument('<run_id>')
    .requiredOption('--reason <text>', 'why (recorded with the run)')
    .action(async (runId: string, flags: ApiFlags & { reason: string }) => {
      const run = await ApiClient.fromFlags(flags).post<Run>(`${path(runId)}/cancel`, {
        reason: flags.reason,
      });
      output(flags.json, run, () => `${run.run_id} is ${run.status}\n`);
    });
}

function describeRun(r: Run): string {
  const lines = [
    `${r.run_id}  ${r.agent}  ${r.status}${r.status_reason === null ? '' : ` (${r.status_reason})`}`,
    `step:    ${r.step}`,
    `input:   ${clip(JSON.stringify(r.input), 100)}`,
    `result:  ${r.result === null ? '-' : clip(JSON.stringify(r.result), 100)}`,
    `error:   ${r.error === null ? '-' : `${r.error.code}: ${r.error.message}`}`,
    `lease:   ${r.lease.owner ?? '-'} (epoch ${r.lease.epoch}, expires ${r.lease.expires_at ?? '-'})`,
    `drives:  ${r.drive_attempts} since the last clean one; model outages in a row: ${r.model_outages}` +
      (r.last_error === null ? '' : `; last error: ${r.last_error.code}: ${clip(r.last_error.message, 80)}`),
    `created: ${r.created_at}  updated: ${r.updated_at}`,
  ];
  if (r.pending_calls.length > 0) {
    lines.push(
      '',
      renderTable(
        ['CALL', 'TOOL', 'HEARD'],
        r.pending_calls.map((c) => [c.idempotency_key, c.tool_name, c.heard ?? '(waiting)']),
      ).trimEnd(),
    );
  }
  return `${lines.join('\n')}\n`;
}
