import { api, q, runEvents, ApiError, type LoopRun, type Page, type Run, type RunEvent } from './api.js';
import { age, badge, facts, h, json, link, replace, table, time } from './dom.js';
import { actWithReason, callHref, canAct, FINAL_RUN, runHref, statusListView, type View } from './common.js';
import { loopConversation } from './conversation.js';

/*
 * Runs: the list, and one run's page. An oncely run shows its facts, its calls and its events as a
 * timeline (who, what, why; the raw event on demand). A run of an application's own loop
 * (`oncely/ai-sdk`, `oncely/openai-agents`), which oncely does not drive, shows its recorded model
 * responses as a conversation and its calls.
 */

const RUN_STATUSES = [
  '',
  'queued',
  'running',
  'awaiting_approval',
  'awaiting_reconciliation',
  'completed',
  'failed',
  'cancelled',
];

export const runsView: View = statusListView({
  title: 'Runs',
  route: 'runs',
  filterId: 'filter-status',
  statuses: RUN_STATUSES,
  caption: 'Runs, newest first',
  head: ['Run', 'Agent', 'Status', 'Step', 'Updated'],
  empty: 'No runs.',
  everyMs: 5_000,
  rows: async (status) => {
    const page = await api<Page<Run>>('GET', `/v1/runs${q({ status, limit: 200 })}`);
    return [...page.items]
      .reverse()
      .map((r) => [
        link(runHref(r.run_id), r.run_id),
        r.agent,
        badge(r.status),
        String(r.step),
        time(r.updated_at),
      ]);
  },
});

export const runView: View = async (main, ctx) => {
  const runId = ctx.args[0] ?? '';
  const controller = new AbortController();
  const events = h('ol', { class: 'events', 'aria-live': 'polite' });
  const show = (run: Run, notice?: HTMLElement): void => {
    const reason = h('textarea', { id: 'run-reason', name: 'reason', rows: 2, maxlength: 2000 });
    const act = (verb: 'cancel' | 'retry'): Promise<void> =>
      actWithReason(
        reason,
        (why) => api<Run>('POST', `/v1/runs/${encodeURIComponent(runId)}/${verb}`, { reason: why }),
        verb === 'cancel' ? 'Cancelled.' : 'Queued again.',
        () => api<Run>('GET', `/v1/runs/${encodeURIComponent(runId)}`),
        show,
      );
    const final = FINAL_RUN.has(run.status);
    replace(
      main,
      h('p', {}, link('#/runs', '← Runs')),
      h('h1', {}, `Run ${run.run_id} `, badge(run.status)),
      notice ?? null,
      facts([
        ['Agent', run.agent],
        ['Step', String(run.step)],
        ['Turn', String(run.turn)],
        [
          'Tokens',
          `${String(run.usage.total_tokens)} (input ${String(run.usage.input_tokens)}, output ${String(run.usage.output_tokens)})` +
            (run.token_budget === null ? '' : ` of a budget of ${String(run.token_budget)}`),
        ],
        ['Why', run.status_reason],
        ['Error', run.error === null ? null : `${run.error.code}: ${run.error.message}`],
        ['Held by', run.lease.owner === null ? null : `${run.lease.owner} (epoch ${run.lease.epoch})`],
        ['Created', time(run.created_at)],
        ['Updated', time(run.updated_at)],
      ]),
      h('h2', {}, 'Input'),
      json(run.input, 'Input as JSON'),
      run.result === null ? null : [h('h2', {}, 'Result'), json(run.result, 'Result as JSON')],
      run.pending_calls.length === 0
        ? null
        : [
            h('h2', {}, 'Calls of the current step'),
            h(
              'ul',
              {},
              run.pending_calls.map((c) =>
                h(
                  'li',
                  {},
                  link(callHref(c.idempotency_key), `${c.tool_name} ${c.idempotency_key}`),
                  c.heard === null ? '' : ` (heard: ${c.heard})`,
                ),
              ),
            ),
          ],
      canAct(ctx.me) && (!final || run.status === 'failed')
        ? h(
            'form',
            { id: 'run-form', 'aria-label': 'Act on this run' },
            h('label', { for: 'run-reason' }, 'Reason (required)'),
            reason,
            h(
              'div',
              { class: 'buttons' },
              final
                ? null
                : h(
                    'button',
                    { type: 'button', class: 'danger', onclick: () => void act('cancel') },
                    'Cancel run',
                  ),
              run.status === 'failed'
                ? h('button', { type: 'button', onclick: () => void act('retry') }, 'Retry run')
                : null,
            ),
          )
        : null,
      h('h2', {}, 'Events (live)'),
      events,
    );
  };
  let run: Run;
  try {
    run = await api<Run>('GET', `/v1/runs/${encodeURIComponent(runId)}`);
  } catch (error) {
    // Not a run oncely drives: a run of the application's own loop, if anything was recorded under it.
    if (!(error instanceof ApiError && error.status === 404)) throw error;
    return loopRunView(main, runId);
  }
  show(run);
  void (async () => {
    try {
      for await (const e of runEvents(runId, controller.signal)) events.append(timelineItem(e));
    } catch {
      // The view closed, or the stream ended with the page.
    }
  })();
  return () => controller.abort();
};

/** What each kind of run event is, in a word and a sign. */
const KINDS: Record<string, { icon: string; what: (d: Record<string, unknown>) => string }> = {
  'run.created': { icon: '＋', what: (d) => `Run created for agent ${String(d.agent)}` },
  'run.claimed': {
    icon: '▶',
    what: (d) => `Picked up by a worker (epoch ${String(d.epoch)}, drive ${String(d.driveAttempt)})`,
  },
  'run.status': { icon: '●', what: (d) => `Now ${String(d.status).replaceAll('_', ' ')}` },
  'run.message': { icon: '✉', what: (d) => `A new message: turn ${String(d.turn)}` },
  'model.response': {
    icon: '✦',
    what: (d) => {
      const calls = (d.calls ?? []) as { toolName: string }[];
      const text = typeof d.text === 'string' && d.text !== '' ? `“${d.text}”` : '';
      const asks = calls.length === 0 ? '' : ` asks ${calls.map((c) => c.toolName).join(', ')}`;
      return `Model, step ${String(d.step)}: ${text}${asks}`.trim();
    },
  },
  'tool.settled': {
    icon: '✓',
    what: (d) => `${String(d.toolName)}: the model heard ${String(d.heard).replaceAll('_', ' ')}`,
  },
  'tool.unknown': {
    icon: '?',
    what: (d) => `${String(d.toolName)}: outcome unknown (${String(d.status)})`,
  },
  'tool.repeat': {
    icon: '↻',
    what: (d) => `${String(d.toolName)} repeats ${String(d.repeatOf)}: ${String(d.decision)}`,
  },
  'approval.requested': { icon: '✋', what: (d) => `${String(d.toolName)} waits for an approval` },
};

/** Who did it: the operator or worker the event names, else the model or the runtime. */
function who(e: RunEvent): string {
  const d = e.data;
  if (typeof d.actor === 'string') return `operator ${d.actor}`;
  if (e.type === 'run.claimed' && typeof d.owner === 'string') return `worker ${d.owner}`;
  if (e.type === 'model.response') return 'model';
  return 'runtime';
}

/** One event of the run as a line of its timeline: sign, when, who, what, why, and the raw event on demand. */
function timelineItem(e: RunEvent): HTMLElement {
  const kind = KINDS[e.type];
  const key = typeof e.data.key === 'string' ? e.data.key : undefined;
  const reason = typeof e.data.reason === 'string' && e.data.reason !== '' ? e.data.reason : undefined;
  return h(
    'li',
    { class: `event event-${e.type.replace('.', '-')}` },
    h('span', { class: 'event-icon', 'aria-hidden': 'true' }, kind?.icon ?? '·'),
    h(
      'div',
      { class: 'event-body' },
      h(
        'p',
        { class: 'event-what' },
        kind === undefined ? e.type : kind.what(e.data),
        key === undefined ? null : [' ', link(callHref(key), 'open call', `Open call ${key}`)],
      ),
      h(
        'p',
        { class: 'event-meta' },
        time(e.at),
        ` · ${who(e)}`,
        reason === undefined ? null : ` · why: ${reason}`,
      ),
      h('details', {}, h('summary', {}, 'Raw event'), json(e, `Event ${e.id} as JSON`)),
    ),
  );
}

/** A run of an application's own loop: its recorded model responses, and its calls. */
async function loopRunView(main: HTMLElement, runId: string): Promise<() => void> {
  const loop = await api<LoopRun>('GET', `/v1/loop-runs/${encodeURIComponent(runId)}`);
  const tokens = loop.steps.reduce((n, s) => n + (s.usage?.total_tokens ?? 0), 0);
  replace(
    main,
    h('p', {}, link('#/runs', '← Runs')),
    h(
      'h1',
      {},
      `Run ${loop.run_id} `,
      // A loop has no run status of oncely's; what an operator needs to see is its unknown calls.
      loop.unknown_calls > 0
        ? h(
            'span',
            { class: 'badge badge-indeterminate' },
            `${loop.unknown_calls} unknown call${loop.unknown_calls === 1 ? '' : 's'}`,
          )
        : null,
    ),
    h(
      'p',
      { class: 'lead' },
      loop.framework === null
        ? 'Calls made under this run id by the application (executeToolCall); oncely does not drive it.'
        : `A run of the application’s own loop (${loop.framework === 'ai-sdk' ? 'oncely/ai-sdk' : 'oncely/openai-agents'}): ` +
            'oncely recorded each model response before its tools ran, and guards its calls; the application drives it.',
    ),
    facts([
      ['Model responses', String(loop.steps.length)],
      ['Tokens', tokens === 0 ? null : String(tokens)],
      ['Calls', String(loop.calls.length)],
      ['Unknown calls', loop.unknown_calls === 0 ? null : String(loop.unknown_calls)],
      ['First recorded', time(loop.created_at)],
      ['Last change', time(loop.updated_at)],
    ]),
    h('h2', {}, 'Conversation'),
    h(
      'p',
      { class: 'help' },
      'The model’s recorded responses; the prompts are the application’s own and are not stored.',
    ),
    loopConversation(loop),
    h('h2', {}, 'Calls'),
    table(
      'The run’s calls, oldest first',
      ['Call', 'Tool', 'Status', 'Started', 'Reference'],
      loop.calls.map((c) => [
        link(callHref(c.idempotency_key), c.idempotency_key, `Open call ${c.idempotency_key}`),
        c.tool_name,
        badge(c.status),
        `${age(c.attempt_started_at)} ago`,
        c.result_reference ?? '–',
      ]),
      'No calls.',
    ),
  );
  return () => undefined;
}
