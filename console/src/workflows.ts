import { api, q, type Page, type WorkflowRun } from './api.js';
import { badge, facts, h, json, link, replace, table, time } from './dom.js';
import { actWithReason, statusListView, type View } from './common.js';

/*
 * Workflow runs: the list, and one workflow run with each node, its state and its runs (links to the
 * run pages); an operator cancels one, or decides for one waiting on a paused node. Both pages look
 * again every two seconds while open.
 */

const FINAL = new Set(['completed', 'failed', 'cancelled']);
const STATUSES = ['', 'running', 'awaiting_operator', 'completed', 'failed', 'cancelled'];
const href = (id: string): string => `#/workflows/${encodeURIComponent(id)}`;
const runHref = (runId: string): string => `#/runs/${encodeURIComponent(runId)}`;
const callHref = (key: string): string => `#/calls/${encodeURIComponent(key)}`;
const EVERY_MS = 2_000;

export const workflowsView: View = statusListView({
  title: 'Workflows',
  route: 'workflows',
  filterId: 'filter-workflow-status',
  statuses: STATUSES,
  caption: 'Workflow runs, newest first',
  head: ['Workflow run', 'Workflow', 'Status', 'Updated', 'Why'],
  empty: 'No workflow runs.',
  everyMs: EVERY_MS,
  rows: async (status) => {
    const page = await api<Page<WorkflowRun>>('GET', `/v1/workflow-runs${q({ status, limit: 200 })}`);
    return page.items.map((w) => [
      link(href(w.workflow_run_id), w.workflow_run_id),
      w.workflow,
      badge(w.status),
      time(w.updated_at),
      w.status_reason ?? '',
    ]);
  },
});

export const workflowView: View = async (main, ctx) => {
  const id = ctx.args[0] ?? '';
  const path = `/v1/workflow-runs/${encodeURIComponent(id)}`;
  const canAct = ctx.me.role === 'operator' || ctx.me.role === 'admin';
  let shown = '';
  const show = (w: WorkflowRun, notice?: HTMLElement): void => {
    const reason = h('textarea', { id: 'workflow-reason', name: 'reason', rows: 2, maxlength: 2000 });
    const act = (verb: string, body: Record<string, unknown>, done: string): Promise<void> =>
      actWithReason(
        reason,
        (why) => api<WorkflowRun>('POST', `${path}/${verb}`, { ...body, reason: why }),
        done,
        () => api<WorkflowRun>('GET', path),
        show,
      );
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
      paused === undefined || paused.standing_calls.length === 0
        ? null
        : [
            h('h2', {}, `What stands from node ${paused.name}'s failed run`),
            h(
              'p',
              { class: 'help' },
              'These calls took effect or may have. A retry is a fresh run with new keys: it could make them again ' +
                '(it is told of them). Settle an unknown call first if you can.',
            ),
            table(
              'Calls that stand',
              ['Call', 'Tool', 'Outcome', 'Reference'],
              paused.standing_calls.map((c) => [
                link(callHref(c.idempotency_key), c.idempotency_key, `Open call ${c.idempotency_key}`),
                c.tool_name,
                c.conflict ? 'failed, then took effect (conflict)' : badge(c.status),
                c.result_reference ?? '–',
              ]),
              'None.',
            ),
          ],
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
                        onclick: () =>
                          void act(
                            'decide',
                            { node: paused.name, action: 'skip' },
                            `Node ${paused.name} skipped.`,
                          ),
                      },
                      `Skip node ${paused.name}`,
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
