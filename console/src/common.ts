import { ApiError, q, type Me } from './api.js';
import { announce, h, replace, table, type Child } from './dom.js';

/* What every page shares: its context, its links, and the two shapes of page most of them are. */

export interface ViewContext {
  readonly me: Me;
  readonly args: string[];
  readonly refreshCounts: () => void;
}

/** Renders into `main`; resolves to the view's cleanup. */
export type View = (main: HTMLElement, ctx: ViewContext) => Promise<() => void>;

export const canAct = (me: Me): boolean => me.role === 'operator' || me.role === 'admin';
export const UNKNOWN = new Set(['started', 'indeterminate']);
export const FINAL_RUN = new Set(['completed', 'failed', 'cancelled']);

export const callHref = (key: string): string => `#/calls/${encodeURIComponent(key)}`;
export const runHref = (runId: string): string => `#/runs/${encodeURIComponent(runId)}`;

/** A short one-line view of a JSON value, for a table cell. */
export function brief(value: unknown, max = 60): string {
  const s = JSON.stringify(value) ?? '';
  return s.length > max ? `${s.slice(0, max - 1)}…` : s;
}

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
