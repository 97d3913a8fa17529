import {
  api,
  askHook,
  hookWords,
  q,
  ApiError,
  type IncidentGroup,
  type Incidents,
  type ResolvedTogether,
} from './api.js';
import { age, announce, h, link, replace } from './dom.js';
import { brief, callHref, canAct, runHref, type View } from './common.js';

/*
 * Incidents: the unknown calls an outage leaves behind, grouped by tool and downstream, searched by
 * key, account or any argument value. An operator who checked several downstream settles them
 * together with one reason (the API settles each by compare-and-set and says which had moved on),
 * or asks a call's reconcile hook now.
 */

export const incidentsView: View = async (main, ctx) => {
  const params = new URLSearchParams(location.hash.split('?')[1] ?? '');
  const search = h('input', {
    id: 'incident-q',
    name: 'q',
    type: 'search',
    autocomplete: 'off',
    spellcheck: 'false',
    value: params.get('q') ?? '',
  });
  const body = h('div', { id: 'incident-body' });
  const outcome = h('div', { id: 'incident-outcome' });
  const searchForm = h(
    'form',
    { class: 'filters', role: 'search', 'aria-label': 'Search unknown calls' },
    h('label', { for: 'incident-q' }, 'Search'),
    search,
    h('button', { type: 'submit', class: 'secondary' }, 'Search'),
  );
  searchForm.addEventListener('submit', (event) => {
    event.preventDefault();
    location.hash = `#/incidents${q({ q: search.value.trim() })}`;
  });
  replace(
    main,
    h('h1', {}, 'Incidents'),
    h(
      'p',
      { class: 'lead' },
      'Unknown calls grouped by tool and downstream. Search by idempotency key, run, account or any argument ' +
        'value; select the calls you checked downstream together and settle them with one reason.',
    ),
    searchForm,
    h('p', { class: 'help', id: 'incident-q-help' }, 'Every word must match, e.g. acct_7 or "p_1 900".'),
    outcome,
    body,
  );
  search.setAttribute('aria-describedby', 'incident-q-help');

  const selected = (): string[] =>
    [...body.querySelectorAll<HTMLInputElement>('input[name=call]:checked')].map((c) => c.value);

  const load = async (): Promise<void> => {
    const found = await api<Incidents>('GET', `/v1/incidents${q({ q: search.value.trim() })}`);
    const groups = found.groups.map((g, i) => groupSection(g, i, canAct(ctx.me), askHookOf));
    replace(
      body,
      h(
        'p',
        { id: 'incident-summary' },
        found.unknown === 0
          ? 'No unknown calls: every call of this tenant has a known outcome or may still land.'
          : `${found.matched} of ${found.unknown} unknown calls${found.q === null ? '' : ` match “${found.q}”`}` +
              (found.capped ? ' (the 1000 longest waiting were read)' : '') +
              `, in ${found.groups.length} group${found.groups.length === 1 ? '' : 's'}.`,
      ),
      groups,
      canAct(ctx.me) && found.matched > 0
        ? settleForm()
        : found.matched > 0
          ? h('p', { class: 'help' }, `Your key is a ${ctx.me.role}: you can look, not act.`)
          : null,
    );
  };

  const settleForm = (): HTMLElement => {
    const reason = h('textarea', {
      id: 'together-reason',
      name: 'reason',
      required: true,
      rows: 2,
      maxlength: 2000,
    });
    const force = h('input', { id: 'together-force', name: 'force', type: 'checkbox' });
    const radio = (value: string, label: string) =>
      h(
        'label',
        { class: 'choice' },
        h('input', { type: 'radio', name: 'together-status', value, required: true }),
        ` ${label}`,
      );
    const form = h(
      'form',
      { id: 'together-form', 'aria-labelledby': 'together-title' },
      h('h2', { id: 'together-title' }, 'Settle the selected calls together'),
      h(
        'fieldset',
        {},
        h('legend', {}, 'What did you find downstream for every selected call?'),
        radio('completed', 'They took effect (completed)'),
        radio('failed', 'They did not take effect (failed)'),
      ),
      h(
        'label',
        { for: 'together-reason' },
        'Reason, for every one of them (required; kept in each history)',
      ),
      reason,
      h(
        'label',
        { class: 'choice' },
        force,
        ' Their attempts may still be running, and I am sure anyway (recorded as forced)',
      ),
      h('button', { type: 'submit' }, 'Settle selected'),
    );
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const keys = selected();
      const status = form.querySelector<HTMLInputElement>('input[name=together-status]:checked')?.value;
      if (keys.length === 0) {
        announce('Select the calls you checked first.', 'error');
        return;
      }
      void settle(keys, { status, reason: reason.value, ...(force.checked ? { force: true } : {}) });
    });
    return form;
  };

  const settle = async (keys: string[], body: Record<string, unknown>): Promise<void> => {
    try {
      const done = await api<ResolvedTogether>('POST', '/v1/tool-executions/resolve', { keys, ...body });
      const said = `Settled ${done.settled.length} of ${keys.length} together.`;
      announce(said);
      replace(
        outcome,
        h(
          'div',
          { class: done.moved_on.length === 0 ? 'notice notice-ok' : 'notice notice-warn', role: 'status' },
          h('p', {}, h('strong', {}, said)),
          done.settled.length === 0
            ? null
            : h(
                'p',
                {},
                'Settled: ',
                done.settled.flatMap((r, i) => [
                  i === 0 ? '' : ', ',
                  link(callHref(r.idempotency_key), r.idempotency_key),
                ]),
              ),
          done.moved_on.length === 0
            ? null
            : [
                h('p', {}, 'Left as they stand (they had moved on):'),
                h(
                  'ul',
                  { id: 'moved-on' },
                  done.moved_on.map((m) =>
                    h(
                      'li',
                      {},
                      link(callHref(m.idempotency_key), m.idempotency_key),
                      ` — ${m.code}: ${m.message}`,
                    ),
                  ),
                ),
              ],
        ),
      );
      ctx.refreshCounts();
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      announce(`Not changed: ${error.message}`, 'error');
      replace(
        outcome,
        h(
          'p',
          { class: 'notice notice-error', role: 'alert' },
          `Not changed (${error.code}): ${error.message}`,
        ),
      );
    }
    await load();
  };

  const askHookOf = async (key: string): Promise<void> => {
    try {
      const words = hookWords(await askHook(key), key);
      announce(words);
      replace(outcome, h('p', { class: 'notice notice-ok', role: 'status' }, words));
      ctx.refreshCounts();
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      announce(`Not changed: ${error.message}`, 'error');
      replace(
        outcome,
        h(
          'p',
          { class: 'notice notice-error', role: 'alert' },
          `Not asked (${error.code}): ${error.message}`,
        ),
      );
    }
    await load();
  };

  await load();
  // Read again when the counts move, unless the operator is choosing calls or writing a reason.
  const reload = (): void => {
    const busy = selected().length > 0 || document.activeElement?.id === 'together-reason';
    if (!busy) void load().catch(() => undefined);
  };
  window.addEventListener('oncely:inbox', reload);
  return () => window.removeEventListener('oncely:inbox', reload);
};

function groupSection(
  g: IncidentGroup,
  index: number,
  act: boolean,
  askHook: (key: string) => Promise<void>,
): HTMLElement {
  const title = `${g.tool_name} · ${g.downstream ?? 'downstream not declared'}`;
  const headingId = `group-${index}`;
  const all = h('input', {
    type: 'checkbox',
    id: `${headingId}-all`,
    'aria-label': `Select every call of ${title}`,
  });
  const rows = g.calls.map((r) =>
    h(
      'tr',
      {},
      act
        ? h(
            'td',
            {},
            h('input', {
              type: 'checkbox',
              name: 'call',
              value: r.idempotency_key,
              'aria-label': `Select ${r.idempotency_key}`,
            }),
          )
        : null,
      h('td', {}, age(r.attempt_started_at)),
      h('td', {}, link(callHref(r.idempotency_key), r.idempotency_key, `Open call ${r.idempotency_key}`)),
      h('td', {}, link(runHref(r.run_id), r.run_id)),
      h('td', {}, h('code', {}, brief(r.args, 80))),
      h('td', {}, r.error === null ? r.status : `${r.status}: ${r.error.message}`),
      act && g.can_ask_hook
        ? h(
            'td',
            {},
            h(
              'button',
              {
                type: 'button',
                class: 'secondary',
                'aria-label': `Ask the hook of ${r.idempotency_key} now`,
                onclick: () => void askHook(r.idempotency_key),
              },
              'Ask hook',
            ),
          )
        : act
          ? h('td', {}, '–')
          : null,
    ),
  );
  all.addEventListener('change', () => {
    for (const box of section.querySelectorAll<HTMLInputElement>('input[name=call]'))
      box.checked = all.checked;
  });
  const head = [
    act ? h('th', { scope: 'col' }, all) : null,
    ...['Waiting', 'Call', 'Run', 'Arguments', 'Status'].map((c) => h('th', { scope: 'col' }, c)),
    act ? h('th', { scope: 'col' }, 'Hook') : null,
  ];
  const section = h(
    'section',
    { class: 'incident-group', 'aria-labelledby': headingId },
    h('h2', { id: headingId }, `${title} `, h('span', { class: 'group-count' }, `(${g.count})`)),
    h('p', { class: 'help' }, `${g.effect} · longest waiting ${age(g.oldest_attempt_started_at)}`),
    h(
      'div',
      { class: 'table-wrap' },
      h(
        'table',
        {},
        h('caption', { class: 'visually-hidden' }, `Unknown calls of ${title}`),
        h('thead', {}, h('tr', {}, head)),
        h('tbody', {}, rows),
      ),
    ),
  );
  return section;
}
