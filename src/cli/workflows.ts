import { Command, Option } from 'commander';
import { OncelyError } from '../errors/index.js';
import { WORKFLOW_STATUSES } from '../store/workflow-store.js';
import { WORKFLOW_DECISIONS } from '../workflows/engine.js';
import { ApiClient, type ApiFlags } from '../api/client.js';
import type { Page, WorkflowRun } from '../api/client-types.js';
import { moreHint, withApiFlags } from './operator-flags.js';
import { age, clip, output, renderTable } from './table.js';
import { positiveInt } from './worker.js';

const path = (id: string): string => `/v1/workflow-runs/${encodeURIComponent(id)}`;

/** `oncely workflows start|list|show|cancel|decide`: workflow runs, through the API. */
export function workflowsCommand(): Command {
  const command = new Command('workflows').description(
    'start workflow runs, look at them and their nodes, cancel one, or decide for a paused one (through the API)',
  );
  command.addCommand(startCommand());
  command.addCommand(listCommand());
  command.addCommand(showCommand());
  command.addCommand(cancelCommand());
  command.addCommand(decideCommand());
  return command;
}

function startCommand(): Command {
  return withApiFlags(new Command('start'))
    .description('start a workflow run of a workflow the server defines; a worker advances it')
    .argument('<workflow>')
    .argument('<input>', 'its input: JSON (an object, a string in quotes, …), or plain text')
    .option(
      '--id <workflow_run_id>',
      'your id for it (1-96 of A-Z a-z 0-9 _ . -): starting again is the same run',
    )
    .action(async (workflow: string, text: string, flags: ApiFlags & { id?: string }) => {
      let input: unknown = text;
      try {
        input = JSON.parse(text) as unknown;
      } catch {
        // Not JSON: the text itself.
      }
      const run = await ApiClient.fromFlags(flags).post<WorkflowRun>('/v1/workflow-runs', {
        workflow,
        input,
        ...(flags.id === undefined ? {} : { workflow_run_id: flags.id }),
      });
      output(flags.json, run, () => `${run.workflow_run_id} (${run.workflow}) is ${run.status}\n`);
    });
}

function listCommand(): Command {
  return withApiFlags(new Command('list'))
    .description("the tenant's workflow runs, newest first")
    .addOption(new Option('--status <status>', 'only this status').choices(WORKFLOW_STATUSES))
    .option('--workflow <name>', 'only this workflow')
    .option('--limit <n>', 'items per page (1-500)', positiveInt('--limit'))
    .option('--cursor <cursor>', 'the next page, as printed after the last one')
    .action(
      async (flags: ApiFlags & { status?: string; workflow?: string; limit?: number; cursor?: string }) => {
        const page = await ApiClient.fromFlags(flags).get<Page<WorkflowRun>>('/v1/workflow-runs', {
          status: flags.status,
          workflow: flags.workflow,
          limit: flags.limit,
          cursor: flags.cursor,
        });
        output(flags.json, page, () => {
          if (page.items.length === 0) return 'no workflow runs\n';
          const rows = page.items.map((w) => [
            w.workflow_run_id,
            w.workflow,
            w.status,
            age(w.updated_at),
            clip(w.status_reason, 60),
          ]);
          return (
            renderTable(['WORKFLOW RUN', 'WORKFLOW', 'STATUS', 'UPDATED', 'REASON'], rows) +
            moreHint('workflows list', page)
          );
        });
      },
    );
}

function showCommand(): Command {
  return withApiFlags(new Command('show'))
    .description('one workflow run: each node, its state and its runs')
    .argument('<workflow_run_id>')
    .action(async (id: string, flags: ApiFlags) => {
      const run = await ApiClient.fromFlags(flags).get<WorkflowRun>(path(id));
      output(flags.json, run, () => describe(run));
    });
}

function cancelCommand(): Command {
  return withApiFlags(new Command('cancel'))
    .description(
      'cancel a workflow run: no node starts again, its node runs not ended are cancelled; nothing is undone',
    )
    .argument('<workflow_run_id>')
    .requiredOption('--reason <text>', 'why (recorded with the workflow run)')
    .action(async (id: string, flags: ApiFlags & { reason: string }) => {
      const run = await ApiClient.fromFlags(flags).post<WorkflowRun>(`${path(id)}/cancel`, {
        reason: flags.reason,
      });
      output(flags.json, run, () => `${run.workflow_run_id} is ${run.status}\n`);
    });
}

function decideCommand(): Command {
  return withApiFlags(new Command('decide'))
    .description(
      'for a workflow run waiting on a paused node: retry the node (a fresh run, new keys, told of the calls that stand), skip it, or fail the workflow run',
    )
    .argument('<workflow_run_id>')
    .requiredOption('--node <name>', 'the node it waits on')
    .addOption(
      new Option('--action <action>', 'what to do').choices([...WORKFLOW_DECISIONS]).makeOptionMandatory(),
    )
    .requiredOption('--reason <text>', 'what you checked (recorded with the workflow run)')
    .action(async (id: string, flags: ApiFlags & { node: string; action: string; reason: string }) => {
      if (flags.reason.trim() === '')
        throw new OncelyError('LEDGER_REASON_REQUIRED', '--reason must say what you checked');
      const run = await ApiClient.fromFlags(flags).post<WorkflowRun>(`${path(id)}/decide`, {
        node: flags.node,
        action: flags.action,
        reason: flags.reason,
      });
      output(flags.json, run, () => `${run.workflow_run_id} is ${run.status}\n`);
    });
}

function describe(w: WorkflowRun): string {
  const lines = [
    `${w.workflow_run_id}  ${w.workflow}  ${w.status}${w.status_reason === null ? '' : ` (${w.status_reason})`}`,
    `input:   ${clip(JSON.stringify(w.input), 100)}`,
    `result:  ${w.result === null ? '-' : clip(JSON.stringify(w.result), 100)}`,
    `error:   ${w.error === null ? '-' : `${w.error.code}: ${w.error.message}`}`,
    `created: ${w.created_at}  updated: ${w.updated_at}`,
  ];
  const nodes = w.nodes ?? [];
  if (nodes.length > 0) {
    lines.push(
      '',
      renderTable(
        ['NODE', 'AGENT', 'STATE', 'RUNS', 'WHY'],
        nodes.map((n) => [
          n.name,
          n.agent,
          n.state,
          n.attempts.length === 0 ? '-' : n.attempts.map((a) => `${a.run_id} (${a.status ?? '?'})`).join(' '),
          clip(n.reason, 60),
        ]),
      ).trimEnd(),
    );
  }
  const standing = nodes.filter((n) => n.standing_calls.length > 0);
  for (const n of standing) {
    lines.push(
      '',
      `calls of node ${n.name}'s failed run that took effect or may have (a retry could repeat them):`,
    );
    for (const c of n.standing_calls) {
      const status = c.conflict ? 'failed, then took effect (conflict)' : c.status;
      lines.push(
        `  ${c.idempotency_key}  ${c.tool_name}  ${status}${c.result_reference === null ? '' : `  ref ${c.result_reference}`}`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}
