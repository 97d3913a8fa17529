import { api, type Approval, type Page, type ToolExecution } from './api.js';
import { age, badge, h, link, replace, table } from './dom.js';
import { brief, callHref, runHref, type View } from './common.js';

/*
 * The inbox, the console's home: calls nobody knows the outcome of, calls a late outcome
 * contradicted, and calls waiting for an approval, read again as the server says the counts moved.
 */

const AGES: [string, number][] = [
  ['any age', 0],
  ['at least 1 minute', 60_000],
  ['at least 10 minutes', 600_000],
  ['at least 1 hour', 3_600_000],
];

// ---------------------------------------------------------------------------------------------
// Inbox

export const inboxView: View = async (main) => {
  const toolSelect = h('select', { id: 'filter-tool' }, h('option', { value: '' }, 'every tool'));
  const ageSelect = h(
    'select',
    { id: 'filter-age' },
    AGES.map(([label, ms]) => h('option', { value: String(ms) }, label)),
  );
  const body = h('div', { id: 'inbox-body' });
  replace(
    main,
    h('h1', {}, 'Inbox'),
    h(
      'p',
      { class: 'lead' },
      'Calls nobody knows the outcome of, calls a late outcome contradicted, and calls waiting for an approval. Updated as they change.',
    ),
    h(
      'form',
      { class: 'filters', 'aria-label': 'Filters' },
      h('label', { for: 'filter-tool' }, 'Tool'),
      toolSelect,
      h('label', { for: 'filter-age' }, 'Waiting'),
      ageSelect,
    ),
    body,
  );
  const tools = new Set<string>();
  const load = async (): Promise<void> => {
    const [unknown, conflicts, approvals] = await Promise.all([
      api<Page<ToolExecution>>('GET', '/v1/tool-executions?status=unknown&limit=200'),
      api<Page<ToolExecution>>('GET', '/v1/tool-executions?status=conflict&limit=200'),
      api<Page<Approval>>('GET', '/v1/approvals?status=pending&limit=200'),
    ]);
    for (const name of [...unknown.items, ...conflicts.items, ...approvals.items].map((i) => i.tool_name)) {
      if (!tools.has(name)) {
        tools.add(name);
        toolSelect.append(h('option', { value: name }, name));
      }
    }
    const tool = toolSelect.value;
    const minAge = Number(ageSelect.value);
    const now = Date.now();
    const keep = (toolName: string, since: string): boolean =>
      (tool === '' || toolName === tool) && now - Date.parse(since) >= minAge;
    const u = unknown.items.filter((r) => keep(r.tool_name, r.attempt_started_at));
    const c = conflicts.items.filter((r) => keep(r.tool_name, r.conflict_at ?? r.updated_at));
    const a = approvals.items.filter((r) => keep(r.tool_name, r.created_at));
    replace(
      body,
      h('h2', { id: 'unknown-title' }, `Unknown calls (${u.length})`),
      u.length < 2
        ? null
        : h(
            'p',
            { class: 'help' },
            'Several at once? ',
            link('#/incidents', 'Group, search and settle them together in Incidents'),
            '.',
          ),
      table(
        'Unknown calls, longest waiting first',
        ['Waiting', 'Tool', 'Status', 'Run', 'Attempt', 'Call'],
        u.map((r) => [
          age(r.attempt_started_at, now),
          r.tool_name,
          badge(r.status),
          link(runHref(r.run_id), r.run_id),
          String(r.attempt),
          link(callHref(r.idempotency_key), r.idempotency_key, `Open call ${r.idempotency_key}`),
        ]),
        'No unknown calls: every call of this tenant has a known outcome or may still land.',
      ),
      h('h2', { id: 'conflicts-title' }, `Conflicts (${c.length})`),
      table(
        'Calls whose settled outcome a real one contradicted',
        ['Since', 'Tool', 'Status', 'Run', 'Call'],
        c.map((r) => [
          age(r.conflict_at, now),
          r.tool_name,
          badge(r.status),
          link(runHref(r.run_id), r.run_id),
          link(callHref(r.idempotency_key), r.idempotency_key, `Open call ${r.idempotency_key}`),
        ]),
        'No conflicts.',
      ),
      h('h2', { id: 'approvals-title' }, `Pending approvals (${a.length})`),
      table(
        'Calls waiting for an approval',
        ['Waiting', 'Tool', 'Arguments', 'Repeat of', 'Run', 'Call'],
        a.map((r) => [
          age(r.created_at, now),
          r.tool_name,
          h('code', {}, brief(r.args)),
          r.repeat_of === null
            ? '–'
            : link(callHref(r.repeat_of), r.repeat_of, `Open earlier call ${r.repeat_of}`),
          link(runHref(r.run_id), r.run_id),
          link(
            `#/approvals/${encodeURIComponent(r.idempotency_key)}`,
            r.idempotency_key,
            `Decide approval ${r.idempotency_key}`,
          ),
        ]),
        'No approvals waiting.',
      ),
    );
  };
  toolSelect.addEventListener('change', () => void load());
  ageSelect.addEventListener('change', () => void load());
  await load();
  // Reloaded when the server says the counts changed, and every 30 s for the ages.
  const reload = (): void => void load().catch(() => undefined);
  window.addEventListener('oncely:inbox', reload);
  const timer = window.setInterval(reload, 30_000);
  return () => {
    window.removeEventListener('oncely:inbox', reload);
    window.clearInterval(timer);
  };
};
