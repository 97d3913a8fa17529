import { Command, Option } from 'commander';
import { APPROVAL_STATUSES } from '../run-state/index.js';
import { ApiClient, type ApiFlags } from '../api/client.js';
import type { Approval, Page } from '../api/client-types.js';
import { moreHint, withApiFlags } from './operator-flags.js';
import { age, clip, output, renderTable } from './table.js';
import { positiveInt } from './worker.js';

const path = (key: string): string => `/v1/approvals/${encodeURIComponent(key)}`;

/**
 * `oncely approvals list|approve|reject`: decide the calls waiting for an operator. A repeat (a call
 * identical to an earlier one that took effect) is listed with the earlier call beside it.
 */
export function approvalsCommand(): Command {
  const command = new Command('approvals').description(
    'decide the calls waiting for approval (through the API)',
  );
  command.addCommand(listCommand());
  command.addCommand(decideCommand('approve'));
  command.addCommand(decideCommand('reject'));
  return command;
}

function listCommand(): Command {
  return withApiFlags(new Command('list'))
    .description('approvals, pending first')
    .addOption(new Option('--status <status>', 'only this status').choices(APPROVAL_STATUSES))
    .option('--limit <n>', 'items per page (1-500)', positiveInt('--limit'))
    .option('--cursor <cursor>', 'the next page, as printed after the last one')
    .action(async (flags: ApiFlags & { status?: string; limit?: number; cursor?: string }) => {
      const page = await ApiClient.fromFlags(flags).get<Page<Approval>>('/v1/approvals', {
        status: flags.status,
        limit: flags.limit,
        cursor: flags.cursor,
      });
      output(flags.json, page, () => {
        if (page.items.length === 0) return 'no approvals\n';
        const rows = page.items.map((a) => [
          a.idempotency_key,
          a.tool_name,
          a.status,
          age(a.created_at),
          a.repeat_of ?? '-',
          clip(JSON.stringify(a.args), 50),
        ]);
        const repeats = page.items.filter((a) => a.repeat_of !== null).map(describeRepeat);
        return (
          renderTable(['KEY', 'TOOL', 'STATUS', 'AGE', 'REPEAT OF', 'ARGS'], rows) +
          repeats.map((text) => `\n${text}`).join('') +
          moreHint('approvals list', page)
        );
      });
    });
}

function decideCommand(decision: 'approve' | 'reject'): Command {
  const command = withApiFlags(new Command(decision))
    .description(
      decision === 'approve'
        ? 'approve the call (these exact arguments, once)'
        : 'reject the call; the model hears the reason',
    )
    .argument('<key>', 'the key of the waiting call, <run_id>:<tool_call_id>');
  if (decision === 'approve') command.option('--reason <text>', 'why (optional)');
  else command.requiredOption('--reason <text>', 'why: the model hears it');
  return command.action(async (key: string, flags: ApiFlags & { reason?: string }) => {
    const approval = await ApiClient.fromFlags(flags).post<Approval>(`${path(key)}/${decision}`, {
      ...(flags.reason === undefined ? {} : { reason: flags.reason }),
    });
    output(flags.json, approval, () => `${approval.idempotency_key} is ${approval.status}\n`);
  });
}

/**
 * A repeat's two calls one above the other, so an operator compares them before deciding: the
 * arguments asked for now, and the earlier call's arguments and what it came to.
 */
function describeRepeat(a: Approval): string {
  const e = a.earlier;
  const head = `${a.idempotency_key} repeats ${a.repeat_of ?? '-'} (${a.tool_name}):`;
  const now = `  this call: ${JSON.stringify(a.args)}`;
  if (e === null) return [head, now, '  earlier:   not in the ledger', ''].join('\n');
  const outcome =
    e.error === null
      ? `result ${e.result === null ? '-' : JSON.stringify(e.result)}, reference ${e.result_reference ?? '-'}`
      : `error ${e.error.code}: ${e.error.message}`;
  return [
    head,
    now,
    `  earlier:   ${JSON.stringify(e.args)}`,
    `             ${e.status}, ${outcome}`,
    '',
  ].join('\n');
}
