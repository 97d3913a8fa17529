import { api, q, ApiError, type Page, type WorkflowRun } from './api.js';
import { announce, badge, facts, h, json, link, replace, table, time } from './dom.js';
import type { View } from './views.js';

/*
 * Workflow runs: the list, and one workflow run with each node, its state and its runs (links to the
 * run pages); an operator cancels one, or decides for one waiting on a paused node. Both pages look
 * again every two seconds while open.
 */

const FINAL = new Set(['completed', 'failed', 'cancelled']);
const STATUSES = ['', 'running', 'awaiting_operator', 'completed', 'failed', 'cancelled'];
const href = (id: string): string => `#/workflows/${encodeURIComponent(id)}`;
const runHref = (runId: string): string => `#/runs/${encodeURIComponent(runId)}`;
const EVERY_MS = 2_000;

export const workflowsView: View = async (main) => {
  const params = new URLSearchParams(location.hash.split('?')[1] ?? '');
  const select = h(
    'select',
    { id: 'filter-workflow-status' },
    STATUSES.map((s) =>
      h(
        'option',
        { value: s, selected: s === (params.get('status') ?? '') },
        s === '' ? 'every status' : s.replaceAll('_', ' '),
      ),
    ),
  );
  const body = h('div', {});
  replace(
    main,
    h('h1', {}, 'Workflows'),
    h(
      'form',
      { class: 'filters', 'aria-label': 'Filters' },
      h('label', { for: 'filter-workflow-status' }, 'Status'),
      select,
    ),
    body,
  );
  const load = async (): Promise<void> => {
    const page = await api<Page<WorkflowRun>>(
      'GET',
      `/v1/workflow-runs${q({ status: select.value, limit: 200 })}`,
    );
    replace(
      body,
      table(
        'Workflow runs, newest first',
        ['Workflow run', 'Workflow', 'Status', 'Updated', 'Why'],
        page.items.map((w) => [
          link(href(w.workflow_run_id), w.workflow_run_id),
          w.workflow,
          badge(w.status),
          time(w.updated_at),
          w.status_reason ?? '',
        ]),
        'No workflow runs.',
      ),
    );
  };
  select.addEventListener('change', () => {
    location.hash = `#/workflows${q({ status: select.value })}`;
  });
  await load();
  const timer = window.setInterval(() => void load().catch(() => undefined), EVERY_MS);
  return () => window.clearInterval(timer);
};

export const workflowView: View = async (main, ctx) => {
  const id = ctx.args[0] ?? '';
  const path = `/v1/workflow-runs/${encodeURIComponent(id)}`;
  const canAct = ctx.me.role === 'operator' || ctx.me.role === 'admin';
  let shown = '';
  const show = (w: WorkflowRun, notice?: HTMLElement): void => {
    const reason = h('textarea', { id: 'workflow-reason', name: 'reason', rows: 2, maxlength: 2000 });
    const act = async (verb: string, body: Record<string, unknown>, done: string): Promise<void> => {
      if (reason.value.trim() === '') {
        announce('A reason is required.', 'error');
        reason.focus();
        return;
      }
      try {
        const next = await api<WorkflowRun>('POST', `${path}/${verb}`, { ...body, reason: reason.value });
        announce(done);
        show(next, h('p', { class: 'notice notice-ok', role: 'status' }, done));
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        announce(`Not changed: ${error.message}`, 'error');
        show(
          await api<WorkflowRun>('GET', path),
          h(
            'p',
            { class: 'notice notice-error', role: 'alert' },
            `Not changed (${error.code}): ${error.message}`,
          ),
        );
      }
    };
    const paused =
      w.status === 'awaiting_operator' ? (w.nodes ?? []).find((n) => n.state === 'failed') : undefined;
    shown = JSON.stringify(w);
    replace(
      main,
      h('p', {}, link('#/workflows', '← Workflows')),
      h('h1', {}, `Workflow run ${w.workflow_run_id} `, badge(w.status)),
      notice ?? null,
      facts([
        ['Workflow', w.workflow],
        ['Why', w.status_reason],
        ['Error', w.error === null ? null : `${w.error.code}: ${w.error.message}`],
        ['Created', time(w.created_at)],
        ['Updated', time(w.updated_at)],
      ]),
      h('h2', {}, 'Nodes'),
      table(
        'Nodes, in order',
        ['Node', 'Agent', 'State', 'Runs', 'Why'],
        (w.nodes ?? []).map((n) => [
          n.name,
          n.agent,
          badge(n.state),
          n.attempts.length === 0
            ? '–'
            : h(
                'ul',
                {},
                n.attempts.map((a) =>
                  h('li', {}, link(runHref(a.run_id), a.run_id), ` (${a.status ?? '?'})`),
                ),
              ),
          n.reason ?? '',
        ]),
        'No nodes.',
      ),
      h('h2', {}, 'Input'),
      json(w.input, 'Input as JSON'),
      w.result === null ? null : [h('h2', {}, 'Result'), json(w.result, 'Result as JSON')],
      canAct && !FINAL.has(w.status)
        ? h(
            'form',
            { id: 'workflow-form', 'aria-label': 'Act on this workflow run' },
            h('label', { for: 'workflow-reason' }, 'Reason (required)'),
            reason,
            h(
              'div',
              { class: 'buttons' },
              paused === undefined
                ? null
                : [
                    h(
                      'button',
                      {
                        type: 'button',
                        onclick: () =>
                          void act(
                            'decide',
                            { node: paused.name, action: 'retry' },
                            `Node ${paused.name} runs again.`,
                          ),
                      },
                      `Retry node ${paused.name}`,
                    ),
                    h(
                      'button',
                      {
                        type: 'button',
                        class: 'danger',
                        onclick: () => void act('decide', { node: paused.name, action: 'fail' }, 'Failed.'),
                      },
                      'Fail workflow run',
                    ),
                  ],
              h(
                'button',
                { type: 'button', class: 'danger', onclick: () => void act('cancel', {}, 'Cancelled.') },
                'Cancel workflow run',
              ),
            ),
          )
        : null,
    );
  };
  show(await api<WorkflowRun>('GET', path));
  const timer = window.setInterval(() => {
    void api<WorkflowRun>('GET', path)
      .then((w) => {
        // Redrawn only when it changed, and never while the operator is typing a reason.
        const typing = document.activeElement?.id === 'workflow-reason';
        if (JSON.stringify(w) !== shown && !typing) show(w);
      })
      .catch(() => undefined);
  }, EVERY_MS);
  return () => window.clearInterval(timer);
};
