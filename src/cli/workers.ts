import { Command } from 'commander';
import { ApiClient, type ApiFlags } from '../api/client.js';
import type { Worker } from '../api/client-types.js';
import { withApiFlags } from './operator-flags.js';
import { age, clip, output, renderTable } from './table.js';

/** `oncely workers`: the processes that drive runs, their last heartbeat and the runs of your tenant each holds. */
export function workersCommand(): Command {
  return withApiFlags(new Command('workers'))
    .description(
      'the workers heard from in the last hour: live or not, last heartbeat, and the runs of your tenant each holds (through the API)',
    )
    .action(async (flags: ApiFlags) => {
      const { items } = await ApiClient.fromFlags(flags).get<{ items: Worker[] }>('/v1/workers');
      output(flags.json, { items }, () => {
        if (items.length === 0) return 'no workers heard from in the last hour\n';
        const rows = items.map((w) => [
          w.worker_id ?? '(admin only)',
          w.kind,
          w.live ? (w.stopping ? 'stopping' : 'live') : 'silent',
          age(w.last_heartbeat_at),
          age(w.started_at),
          String(w.concurrency),
          w.version,
          w.runs.length === 0 ? '-' : clip(w.runs.map((r) => r.run_id).join(' '), 60),
        ]);
        return renderTable(
          ['WORKER', 'KIND', 'STATE', 'HEARTBEAT', 'UP', 'CONCURRENCY', 'VERSION', 'YOUR RUNS'],
          rows,
        );
      });
    });
}
