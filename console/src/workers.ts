import { api, type Worker } from './api.js';
import { age, h, link, replace, table } from './dom.js';
import { runHref, type View } from './common.js';

/* The processes heard from in the last hour, with the runs of the tenant each holds. */

export const workersView: View = async (main) => {
  const body = h('div', {});
  replace(
    main,
    h('h1', {}, 'Workers'),
    h(
      'p',
      { class: 'lead' },
      'Processes heard from in the last hour, with the runs of your tenant each holds.',
    ),
    body,
  );
  const load = async (): Promise<void> => {
    const { items } = await api<{ items: Worker[] }>('GET', '/v1/workers');
    replace(
      body,
      table(
        'Workers',
        ['Worker', 'Kind', 'Live', 'Last heartbeat', 'Runs held', 'Version'],
        items.map((w) => [
          w.worker_id ?? h('span', { class: 'help' }, 'hidden (admins only)'),
          w.kind,
          w.stopping ? 'stopping' : w.live ? 'live' : 'not heard from',
          `${age(w.last_heartbeat_at)} ago`,
          w.runs.length === 0
            ? '–'
            : h(
                'ul',
                {},
                w.runs.map((r) => h('li', {}, link(runHref(r.run_id), r.run_id))),
              ),
          w.version,
        ]),
        'No worker has been heard from in the last hour.',
      ),
    );
  };
  await load();
  const timer = window.setInterval(() => void load().catch(() => undefined), 5_000);
  return () => window.clearInterval(timer);
};
