import { Command, Option } from 'commander';
import { OncelyError } from '../errors/index.js';
import { RUN_STATUSES } from '../run-state/index.js';
import { ApiClient, type ApiFlags } from '../api/client.js';
import type { Page, Run, RunMessages, SentMessage, TenantUsage } from '../api/client-types.js';
import { moreHint, withApiFlags } from './operator-flags.js';
import { age, clip, output, renderTable } from './table.js';
import { positiveInt } from './worker.js';

const path = (runId: string): string => `/v1/runs/${encodeURIComponent(runId)}`;

/**
 * `oncely runs list|show|send|messages|cancel|retry`: look at runs, talk to one, stop one, re-drive a
 * failed one.
 */
export function runsCommand(): Command {
  const command = new Command('runs').description(
    'look at runs, send a run its next message, cancel one, or retry a failed one (through the API)',
  );
  command.addCommand(listCommand());
  command.addCommand(showCommand());
  command.addCommand(sendCommand());
  command.addCommand(messagesCommand());
  command.addCommand(cancelCommand());
  command.addCommand(retryCommand());
  return command;
}

/** `oncely usage`: what the tenant's runs cost in tokens. */
export function usageCommand(): Command {
  return withApiFlags(new Command('usage'))
    .description("what the tenant's runs cost in tokens, in all and by agent (through the API)")
    .option('--from <time>', 'only runs created at or after this ISO time')
    .option('--to <time>', 'only runs created before this ISO time')
    .action(async (flags: ApiFlags & { from?: string; to?: string }) => {
      const usage = await ApiClient.fromFlags(flags).get<TenantUsage>('/v1/usage', {
        from: flags.from,
        to: flags.to,
      });
      output(flags.json, usage, () => {
        if (usage.runs === 0) return 'no runs\n';
        const row = (name: string, runs: number, u: TenantUsage['usage']) => [
          name,
          String(runs),
          String(u.input_tokens),
          String(u.output_tokens),
          String(u.reasoning_tokens),
          String(u.cached_input_tokens),
          String(u.total_tokens),
        ];
        return renderTable(
          ['AGENT', 'RUNS', 'INPUT', 'OUTPUT', 'REASONING', 'CACHED', 'TOTAL'],
          [
            ...usage.by_agent.map((a) => row(a.agent, a.runs, a.usage)),
            row('(all)', usage.runs, usage.usage),
          ],
        );
      });
    });
}

function sendCommand(): Command {
  return withApiFlags(new Command('send'))
    .description(
      'send a run that has answered its next user message; a worker answers it (the same --id again is that message, not a second one)',
    )
    .argument('<run_id>')
    .argument('<text>', 'the message (with --json, the content as JSON: a string or a list of parts)')
    .requiredOption('--id <client_message_id>', 'your id for this message (1-128 of A-Z a-z 0-9 _ . -)')
    .option('--content-json', 'read <text> as JSON content: parts such as [{"type":"text","text":"..."}]')
    .action(async (runId: string, text: string, flags: ApiFlags & { id: string; contentJson?: boolean }) => {
      let content: unknown = text;
      if (flags.contentJson === true) {
        try {
          content = JSON.parse(text) as unknown;
        } catch (error) {
          throw new OncelyError(
            'RUN_INPUT_INVALID',
            `--content-json: the message is not JSON (${(error as Error).message}); nothing was sent`,
          );
        }
      }
      const sent = await ApiClient.fromFlags(flags).post<SentMessage>(`${path(runId)}/messages`, {
        client_message_id: flags.id,
        content,
      });
      output(
        flags.json,
        sent,
        () =>
          `${sent.run.run_id} turn ${sent.turn.turn}: message ${sent.turn.client_message_id} taken; ` +
          `the run is ${sent.run.status}\n`,
      );
    });
}

function messagesCommand(): Command {
  return withApiFlags(new Command('messages'))
    .description("a run's conversation, message by message")
    .argument('<run_id>')
    .addOption(new Option('--format <format>', 'with --json: model or ui messages').choices(['model', 'ui']))
    .action(async (runId: string, flags: ApiFlags & { format?: 'model' | 'ui' }) => {
      const got = await ApiClient.fromFlags(flags).get<RunMessages>(`${path(runId)}/messages`, {
        format: flags.format ?? 'ui',
      });
      output(flags.json, got, () => describeConversation(got));
    });
}

/** A conversation as lines: who said what, each call with what the model heard. */
function describeConversation(got: RunMessages): string {
  if (got.format !== 'ui') return `${JSON.stringify(got.messages, null, 2)}\n`;
  const lines: string[] = [];
  for (const message of got.messages as { role: string; parts: Record<string, unknown>[] }[]) {
    for (const part of message.parts) {
      const type = String(part.type);
      if (type === 'text') lines.push(`${message.role === 'user' ? 'user' : 'agent'}: ${String(part.text)}`);
      else if (type === 'file') lines.push(`user: [file ${String(part.filename ?? part.mediaType)}]`);
      else if (type.startsWith('tool-')) {
        const outcome =
          part.state === 'output-available'
            ? clip(JSON.stringify(part.output), 80)
            : part.state === 'output-error'
              ? clip(String(part.errorText), 80)
              : '(waiting)';
        lines.push(`  call ${type.slice(5)} ${clip(JSON.stringify(part.input), 60)} -> ${outcome}`);
      }
    }
  }
  return lines.length === 0 ? 'no messages\n' : `${lines.join('\n')}\n`;
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
    `step:    ${r.step}  turn: ${r.turn}`,
    `tokens:  ${r.usage.total_tokens} (input ${r.usage.input_tokens}, output ${r.usage.output_tokens})` +
      (r.token_budget === null ? '' : ` of a budget of ${r.token_budget}`),
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
