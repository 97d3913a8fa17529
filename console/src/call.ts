import { api, askHook, ApiError, hookWords, type HistoryEntry, type ToolExecution } from './api.js';
import { announce, badge, facts, h, json, link, replace, table, time } from './dom.js';
import { callHref, canAct, runHref, UNKNOWN, type View } from './common.js';
import { showConversation } from './conversation.js';

/*
 * One call on one screen: its facts, arguments, the reconcile hook's last word, the forms to settle,
 * ask its hook now or compensate it, its history, and the run's conversation up to the call.
 */

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
    if (UNKNOWN.has(r.status)) section.append(resolveForm(r), askHookForm(r));
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

  const askHookForm = (r: ToolExecution): HTMLElement => {
    const form = h(
      'form',
      { id: 'ask-hook-form', 'aria-labelledby': 'ask-hook-title' },
      h('h3', { id: 'ask-hook-title' }, 'Or let its reconcile hook look now'),
      h(
        'p',
        { class: 'help' },
        'Runs the tool’s reconcile hook once, now, instead of waiting for the next sweep; what it says is recorded.',
      ),
      h('button', { type: 'submit', class: 'secondary' }, 'Ask the hook now'),
    );
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      let words = '';
      void submit(
        askHook(r.idempotency_key).then((asked) => {
          words = hookWords(asked);
        }),
        () => words,
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
        }),
        null,
      );
    });
    return form;
  };

  /** Shows the answer: the new record, or the API's refusal with the record as it now stands. */
  const submit = async (request: Promise<unknown>, said: string | null | (() => string)): Promise<void> => {
    try {
      await request;
      const done = typeof said === 'function' ? said() : said;
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
