import {
  api,
  q,
  runEvents,
  ApiError,
  type Approval,
  type HistoryEntry,
  type Me,
  type Page,
  type Run,
  type RunEvent,
  type ToolExecution,
  type Worker,
} from './api.js';
import { age, announce, badge, facts, h, json, link, replace, table, time, type Child } from './dom.js';

export interface ViewContext {
  readonly me: Me;
  readonly args: string[];
  readonly refreshCounts: () => void;
}

/** Renders into `main`; resolves to the view's cleanup. */
export type View = (main: HTMLElement, ctx: ViewContext) => Promise<() => void>;

const canAct = (me: Me): boolean => me.role === 'operator' || me.role === 'admin';
const UNKNOWN = new Set(['started', 'indeterminate']);
const FINAL_RUN = new Set(['completed', 'failed', 'cancelled']);

const callHref = (key: string): string => `#/calls/${encodeURIComponent(key)}`;
const runHref = (runId: string): string => `#/runs/${encodeURIComponent(runId)}`;

/** A short one-line view of a JSON value, for a table cell. */
function brief(value: unknown, max = 60): string {
  const s = JSON.stringify(value) ?? '';
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

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

// ---------------------------------------------------------------------------------------------
// One call

interface CallDetail {
  readonly record: ToolExecution;
  readonly history: HistoryEntry[];
}

export const callView: View = async (main, ctx) => {
  const key = ctx.args[0] ?? '';
  const controller = new AbortController();
  const show = (detail: CallDetail, notice?: HTMLElement): void => {
    const r = detail.record;
    const hookSaid = [...detail.history].reverse().find((e) => e.actor.kind === 'reconcile');
    const conversation = h('div', { id: 'conversation' }, h('p', {}, 'Reading the run’s conversation…'));
    replace(
      main,
      h('p', {}, link('#/inbox', '← Inbox')),
      h('h1', {}, `${r.tool_name} `, badge(r.status)),
      notice ?? null,
      facts([
        ['Idempotency key', h('code', {}, r.idempotency_key)],
        ['Effect', r.effect],
        ['Run', link(runHref(r.run_id), r.run_id)],
        ['Tool call', h('code', {}, r.tool_call_id)],
        ['Attempt', String(r.attempt)],
        ['Attempt started', time(r.attempt_started_at)],
        ['Attempt timeout', `${r.attempt_timeout_ms} ms`],
        ['Downstream reference', r.result_reference],
        ['Error', r.error === null ? null : `${r.error.code}: ${r.error.message}`],
        [
          'Settled',
          r.settled_at === null
            ? null
            : [time(r.settled_at), ` by ${r.settled_by?.kind ?? '?'} ${r.settled_by?.id ?? ''}`],
        ],
        [
          'Conflict',
          r.conflict_at === null ? null : ['a real outcome contradicted it at ', time(r.conflict_at)],
        ],
        [
          'Compensates',
          r.compensation_of === null ? null : link(callHref(r.compensation_of), r.compensation_of),
        ],
        ['Record version', String(r.version)],
      ]),
      h('h2', {}, 'Arguments'),
      json(r.args, 'Arguments as JSON'),
      r.result === null ? null : [h('h2', {}, 'Result'), json(r.result, 'Result as JSON')],
      h('h2', {}, 'Reconcile hook'),
      h(
        'p',
        { id: 'hook-said' },
        hookSaid === undefined
          ? 'No answer from a reconcile hook is recorded for this call.'
          : [
              'Last said ',
              time(hookSaid.at),
              `: ${hookSaid.reason ?? '(no reason)'}`,
              hookSaid.to === null ? '' : ` (${hookSaid.from ?? '–'} → ${hookSaid.to})`,
            ],
      ),
      canAct(ctx.me)
        ? actions(r)
        : h('p', { class: 'help' }, `Your key is a ${ctx.me.role}: you can look, not act.`),
      h('h2', {}, 'History'),
      table(
        'Every change of this call, oldest first',
        ['When', 'Who', 'Via', 'From → to', 'Attempt', 'Why'],
        detail.history.map((e) => [
          time(e.at),
          `${e.actor.kind} ${e.actor.id}`,
          e.kind === 'transition' ? e.via : `${e.via} (${e.kind})`,
          `${e.from ?? '–'} → ${e.to ?? '–'}`,
          String(e.attempt),
          e.reason ?? '',
        ]),
        'No history.',
      ),
      h('h2', {}, 'The run’s conversation up to this call'),
      conversation,
    );
    void showConversation(conversation, r, controller.signal);
  };

  const actions = (r: ToolExecution): HTMLElement => {
    const section = h(
      'section',
      { 'aria-labelledby': 'actions-title' },
      h('h2', { id: 'actions-title' }, 'Act'),
    );
    if (UNKNOWN.has(r.status)) section.append(resolveForm(r));
    if (r.status === 'completed' && r.compensation_of === null) section.append(compensateForm(r));
    if (section.children.length === 1)
      section.append(h('p', { class: 'help' }, `A ${r.status} call needs nothing.`));
    return section;
  };

  const resolveForm = (r: ToolExecution): HTMLElement => {
    const reason = h('textarea', {
      id: 'resolve-reason',
      name: 'reason',
      required: true,
      rows: 2,
      maxlength: 2000,
    });
    const result = h('textarea', { id: 'resolve-result', name: 'result', rows: 3, spellcheck: 'false' });
    const reference = h('input', { id: 'resolve-reference', name: 'reference', autocomplete: 'off' });
    const force = h('input', { id: 'resolve-force', name: 'force', type: 'checkbox' });
    const radio = (value: string, label: string) =>
      h(
        'label',
        { class: 'choice' },
        h('input', { type: 'radio', name: 'status', value, required: true }),
        ` ${label}`,
      );
    const form = h(
      'form',
      { id: 'resolve-form', 'aria-labelledby': 'resolve-title' },
      h('h3', { id: 'resolve-title' }, 'Settle this call from what you found downstream'),
      h(
        'fieldset',
        {},
        h('legend', {}, 'Did it take effect?'),
        radio('completed', 'It took effect (completed)'),
        radio('failed', 'It did not take effect (failed)'),
      ),
      h('label', { for: 'resolve-reason' }, 'Reason (required; kept in the history)'),
      reason,
      h('label', { for: 'resolve-reference' }, 'Downstream reference (optional, when it took effect)'),
      reference,
      h(
        'label',
        { for: 'resolve-result' },
        'Result the model hears, as JSON (optional, when it took effect)',
      ),
      result,
      h(
        'label',
        { class: 'choice' },
        force,
        ' Its attempt may still be running, and I am sure anyway (recorded as forced)',
      ),
      h('button', { type: 'submit' }, 'Settle'),
    );
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const status = form.querySelector<HTMLInputElement>('input[name=status]:checked')?.value;
      let parsed: unknown;
      if (result.value.trim() !== '') {
        try {
          parsed = JSON.parse(result.value);
        } catch {
          announce('The result is not valid JSON.', 'error');
          result.focus();
          return;
        }
      }
      void submit(
        api<ToolExecution>('POST', `/v1/tool-executions/${encodeURIComponent(r.idempotency_key)}/resolve`, {
          status,
          reason: reason.value,
          ...(parsed === undefined ? {} : { result: parsed }),
          ...(reference.value.trim() === '' ? {} : { result_reference: reference.value.trim() }),
          ...(force.checked ? { force: true } : {}),
        }),
        `Settled ${r.idempotency_key} as ${status ?? '?'}.`,
      );
    });
    return form;
  };

  const compensateForm = (r: ToolExecution): HTMLElement => {
    const reason = h('textarea', {
      id: 'compensate-reason',
      name: 'reason',
      required: true,
      rows: 2,
      maxlength: 2000,
    });
    const form = h(
      'form',
      { id: 'compensate-form', 'aria-labelledby': 'compensate-title' },
      h('h3', { id: 'compensate-title' }, 'Undo this call (run its compensation once)'),
      h('label', { for: 'compensate-reason' }, 'Reason (required)'),
      reason,
      h('button', { type: 'submit', class: 'danger' }, 'Compensate'),
    );
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      void submit(
        api<{ status: string; record: ToolExecution }>(
          'POST',
          `/v1/tool-executions/${encodeURIComponent(r.idempotency_key)}/compensate`,
          { reason: reason.value },
        ).then((answer) => {
          announce(`Compensation: ${answer.status}.`);
          return answer.record;
        }),
        null,
      );
    });
    return form;
  };

  /** Shows the answer: the new record, or the API's refusal with the record as it now stands. */
  const submit = async (request: Promise<ToolExecution>, done: string | null): Promise<void> => {
    try {
      await request;
      if (done !== null) announce(done);
      ctx.refreshCounts();
      show(
        await load(),
        done === null ? undefined : h('p', { class: 'notice notice-ok', role: 'status' }, done),
      );
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      const stands = error.body.record as ToolExecution | undefined;
      const notice = h(
        'div',
        { class: 'notice notice-error', role: 'alert', id: 'refusal' },
        h('p', {}, h('strong', {}, `Not changed (${error.status} ${error.code}). `), error.message),
        stands === undefined
          ? null
          : h('p', {}, `The call as it stands now: ${stands.status}, version ${stands.version}.`),
      );
      announce(`Not changed: ${error.message}`, 'error');
      show(await load(), notice);
    }
  };

  const load = (): Promise<CallDetail> =>
    api<CallDetail>('GET', `/v1/tool-executions/${encodeURIComponent(key)}`);
  show(await load());
  return () => controller.abort();
};

/** The run's input and its model's steps up to the one that asked for this call. */
async function showConversation(into: HTMLElement, r: ToolExecution, signal: AbortSignal): Promise<void> {
  const items: Child[] = [];
  try {
    const run = await api<Run>('GET', `/v1/runs/${encodeURIComponent(r.run_id)}`);
    items.push(
      h(
        'li',
        { class: 'turn user' },
        h('strong', {}, 'User: '),
        typeof run.input === 'string' ? run.input : brief(run.input, 400),
      ),
    );
    const stop = new AbortController();
    const timer = window.setTimeout(() => stop.abort(), 3_000);
    signal.addEventListener('abort', () => stop.abort());
    try {
      for await (const e of runEvents(r.run_id, stop.signal)) {
        const item = eventItem(e, r.tool_call_id);
        if (item !== null) items.push(item);
        const calls = (e.data.calls ?? []) as { toolCallId: string }[];
        if (e.type === 'model.response' && calls.some((c) => c.toolCallId === r.tool_call_id)) break;
      }
    } catch (error) {
      if (!stop.signal.aborted) throw error;
    } finally {
      window.clearTimeout(timer);
      stop.abort();
    }
    replace(into, h('ol', { class: 'conversation' }, items));
  } catch (error) {
    if (signal.aborted) return;
    replace(
      into,
      h(
        'p',
        { class: 'notice notice-error' },
        `The conversation could not be read: ${(error as Error).message}`,
      ),
    );
  }
}

function eventItem(e: RunEvent, highlight?: string): HTMLElement | null {
  if (e.type === 'model.response') {
    const calls = (e.data.calls ?? []) as { toolCallId: string; toolName: string }[];
    const text = typeof e.data.text === 'string' ? e.data.text : '';
    return h(
      'li',
      { class: 'turn model' },
      h('strong', {}, `Model (step ${String(e.data.step)}): `),
      text === '' ? null : text,
      calls.length === 0
        ? null
        : h(
            'ul',
            {},
            calls.map((c) =>
              h(
                'li',
                { class: c.toolCallId === highlight ? 'this-call' : undefined },
                `asks ${c.toolName} (${c.toolCallId})`,
                c.toolCallId === highlight ? ' ← this call' : '',
              ),
            ),
          ),
    );
  }
  if (e.type === 'run.message') {
    return h(
      'li',
      { class: 'turn user' },
      `A new message: turn ${String(e.data.turn)} (${String(e.data.clientMessageId)})`,
    );
  }
  if (e.type === 'tool.settled') {
    return h(
      'li',
      { class: 'turn tool' },
      `${String(e.data.toolName)} ${String(e.data.key)}: the model heard ${String(e.data.heard)}`,
    );
  }
  return null;
}

// ---------------------------------------------------------------------------------------------
// An approval

export const approvalView: View = async (main, ctx) => {
  const key = ctx.args[0] ?? '';
  const find = async (): Promise<Approval> => {
    for (const status of ['pending', 'approved', 'rejected', 'consumed']) {
      const page = await api<Page<Approval>>('GET', `/v1/approvals${q({ status, limit: 200 })}`);
      const found = page.items.find((a) => a.idempotency_key === key);
      if (found !== undefined) return found;
    }
    throw new ApiError(404, 'APPROVAL_NOT_FOUND', `no approval ${key} in this tenant`, {});
  };
  const show = (a: Approval, notice?: HTMLElement): void => {
    const reason = h('textarea', { id: 'decision-reason', name: 'reason', rows: 2, maxlength: 2000 });
    const decide = (verb: 'approve' | 'reject') => async () => {
      if (verb === 'reject' && reason.value.trim() === '') {
        announce('A rejection needs a reason: the model hears it.', 'error');
        reason.focus();
        return;
      }
      try {
        await api(
          'POST',
          `/v1/approvals/${encodeURIComponent(key)}/${verb}`,
          reason.value.trim() === '' ? {} : { reason: reason.value },
        );
        announce(`${verb === 'approve' ? 'Approved' : 'Rejected'} ${key}.`);
        ctx.refreshCounts();
        show(
          await find(),
          h(
            'p',
            { class: 'notice notice-ok', role: 'status' },
            verb === 'approve' ? 'Approved.' : 'Rejected.',
          ),
        );
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        announce(`Not changed: ${error.message}`, 'error');
        show(
          await find(),
          h(
            'div',
            { class: 'notice notice-error', role: 'alert', id: 'refusal' },
            h('strong', {}, `Not changed (${error.status} ${error.code}). `),
            error.message,
          ),
        );
      }
    };
    replace(
      main,
      h('p', {}, link('#/inbox', '← Inbox')),
      h('h1', {}, `Approval of ${a.tool_name} `, badge(a.status)),
      notice ?? null,
      facts([
        ['Call', h('code', {}, a.idempotency_key)],
        ['Run', link(runHref(a.run_id), a.run_id)],
        ['Asked', time(a.created_at)],
        ['Decided', a.decided_at === null ? null : [time(a.decided_at), ` by ${a.decided_by ?? '?'}`]],
        ['Reason', a.reason],
      ]),
      a.repeat_of === null ? h('h2', {}, 'Arguments to approve') : null,
      a.repeat_of === null ? json(a.args, 'Arguments as JSON') : repeatOf(a),
      a.status === 'pending' && canAct(ctx.me)
        ? h(
            'form',
            { id: 'decision-form', 'aria-label': 'Decide' },
            h('label', { for: 'decision-reason' }, 'Reason (required to reject; the model hears it)'),
            reason,
            h(
              'div',
              { class: 'buttons' },
              h(
                'button',
                { type: 'button', id: 'approve', onclick: () => void decide('approve')() },
                'Approve',
              ),
              h(
                'button',
                { type: 'button', id: 'reject', class: 'danger', onclick: () => void decide('reject')() },
                'Reject',
              ),
            ),
          )
        : a.status === 'pending'
          ? h('p', { class: 'help' }, `Your key is a ${ctx.me.role}: you can look, not decide.`)
          : null,
    );
  };
  show(await find());
  return () => undefined;
};

/**
 * A repeat: the call to approve beside the earlier identical call it repeats, with what that one
 * came to, so the operator sees whether approving would do the same thing twice.
 */
function repeatOf(a: Approval): HTMLElement {
  const e = a.earlier;
  const earlier: Child[] =
    e === null
      ? [h('p', {}, 'The earlier call is not in the ledger.')]
      : [
          json(e.args, 'Earlier arguments as JSON'),
          facts([
            [
              'Call',
              link(callHref(e.idempotency_key), e.idempotency_key, `Open earlier call ${e.idempotency_key}`),
            ],
            ['Status', badge(e.status)],
            ['Result', e.result === null ? null : json(e.result, 'Earlier result as JSON')],
            ['Reference', e.result_reference],
            ['Error', e.error === null ? null : `${e.error.code}: ${e.error.message}`],
          ]),
        ];
  return h(
    'section',
    { class: 'repeat', 'aria-labelledby': 'repeat-title' },
    h('h2', { id: 'repeat-title' }, `A repeat of ${a.repeat_of ?? ''}`),
    h(
      'p',
      { class: 'lead' },
      'The model asked for this call again: the same tool with the same arguments as an earlier call of its run ' +
        'that took effect or may have. Approve only if it should happen twice.',
    ),
    h(
      'div',
      { class: 'side-by-side' },
      h('div', {}, h('h3', {}, 'This call: arguments to approve'), json(a.args, 'Arguments as JSON')),
      h('div', {}, h('h3', {}, 'The earlier call: its arguments and outcome'), ...earlier),
    ),
  );
}

// ---------------------------------------------------------------------------------------------
// Runs

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

/**
 * An operator's action that needs a reason: refused in the page without one; on success the page is
 * shown again with what the API answered and `done`; refused by the API, with the record read again
 * and why nothing changed.
 */
export async function actWithReason<T>(
  reason: HTMLTextAreaElement,
  send: (reason: string) => Promise<T>,
  done: string,
  reread: () => Promise<T>,
  show: (value: T, notice: HTMLElement) => void,
): Promise<void> {
  if (reason.value.trim() === '') {
    announce('A reason is required.', 'error');
    reason.focus();
    return;
  }
  try {
    const next = await send(reason.value);
    announce(done);
    show(next, h('p', { class: 'notice notice-ok', role: 'status' }, done));
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    announce(`Not changed: ${error.message}`, 'error');
    show(
      await reread(),
      h(
        'p',
        { class: 'notice notice-error', role: 'alert' },
        `Not changed (${error.code}): ${error.message}`,
      ),
    );
  }
}

/**
 * A list page: a status filter kept in the address (`#/<route>?status=`), a table of what `rows`
 * lists for it, looked at again every `everyMs` while the page is open.
 */
export function statusListView(options: {
  readonly title: string;
  readonly route: string;
  readonly filterId: string;
  readonly statuses: readonly string[];
  readonly caption: string;
  readonly head: string[];
  readonly empty: string;
  readonly everyMs: number;
  readonly rows: (status: string) => Promise<Child[][]>;
}): View {
  return async (main) => {
    const params = new URLSearchParams(location.hash.split('?')[1] ?? '');
    const select = h(
      'select',
      { id: options.filterId },
      options.statuses.map((s) =>
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
      h('h1', {}, options.title),
      h(
        'form',
        { class: 'filters', 'aria-label': 'Filters' },
        h('label', { for: options.filterId }, 'Status'),
        select,
      ),
      body,
    );
    const load = async (): Promise<void> => {
      replace(body, table(options.caption, options.head, await options.rows(select.value), options.empty));
    };
    select.addEventListener('change', () => {
      location.hash = `#/${options.route}${q({ status: select.value })}`;
    });
    await load();
    const timer = window.setInterval(() => void load().catch(() => undefined), options.everyMs);
    return () => window.clearInterval(timer);
  };
}

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
  show(await api<Run>('GET', `/v1/runs/${encodeURIComponent(runId)}`));
  void (async () => {
    try {
      for await (const e of runEvents(runId, controller.signal)) {
        events.append(
          eventItem(e) ??
            h('li', { class: 'turn' }, time(e.at), ` ${e.type} `, h('code', {}, brief(e.data, 200))),
        );
      }
    } catch {
      // The view closed, or the stream ended with the page.
    }
  })();
  return () => controller.abort();
};

// ---------------------------------------------------------------------------------------------
// Workers

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
          w.worker_id,
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
