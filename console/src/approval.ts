import { api, q, ApiError, type Approval, type Page } from './api.js';
import { announce, badge, facts, h, json, link, replace, time, type Child } from './dom.js';
import { callHref, canAct, runHref, type View } from './common.js';

/* An approval: the exact arguments to approve (a repeat beside the earlier call), Approve or Reject. */

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
