/*
 * A few DOM helpers. Text always goes in as text nodes (never HTML), so nothing a tool, a model or
 * an operator wrote can run in the page.
 */

export type Child = Node | string | number | null | undefined | false;
type Attr = string | number | boolean | null | undefined | ((event: Event) => void);

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, Attr> = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (typeof value === 'function') el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  append(el, children.flat());
  return el;
}

export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(typeof child === 'object' ? child : document.createTextNode(String(child)));
  }
}

export function replace(parent: Element, ...children: (Child | Child[])[]): void {
  parent.replaceChildren();
  append(parent, children.flat());
}

/** A JSON value, pretty, in a focusable block (a screen reader can step through it). */
export function json(value: unknown, label: string): HTMLElement {
  return h('pre', { class: 'json', tabindex: 0, 'aria-label': label }, JSON.stringify(value, null, 2));
}

/** How long ago, as people say it: 42 s, 5 min, 3 h, 2 d. */
export function age(iso: string | null | undefined, now = Date.now()): string {
  if (iso === null || iso === undefined) return '–';
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 90) return `${s} s`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min`;
  if (s < 36 * 3600) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

export function time(iso: string | null | undefined): HTMLElement | string {
  if (iso === null || iso === undefined) return '–';
  return h('time', { datetime: iso, title: iso }, new Date(iso).toLocaleString());
}

/** A definition list of label → value, skipping empty values. */
export function facts(rows: [string, Child | Child[]][]): HTMLElement {
  const dl = h('dl', { class: 'facts' });
  for (const [label, value] of rows) {
    if (value === null || value === undefined || value === '') continue;
    dl.append(h('dt', {}, label), h('dd', {}, value));
  }
  return dl;
}

export function badge(status: string): HTMLElement {
  return h('span', { class: `badge badge-${status}` }, status.replaceAll('_', ' '));
}

export function table(caption: string, head: string[], rows: Child[][], empty: string): HTMLElement {
  if (rows.length === 0) return h('p', { class: 'empty' }, empty);
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      {},
      h('caption', { class: 'visually-hidden' }, caption),
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          head.map((c) => h('th', { scope: 'col' }, c)),
        ),
      ),
      h(
        'tbody',
        {},
        rows.map((r) =>
          h(
            'tr',
            {},
            r.map((c) => h('td', {}, c)),
          ),
        ),
      ),
    ),
  );
}

export function link(href: string, text: string, label?: string): HTMLAnchorElement {
  return h('a', { href, 'aria-label': label }, text);
}

let hideTimer: number | undefined;

/** Takes down what `announce` shows (on leaving a page). */
export function clearAnnouncements(): void {
  window.clearTimeout(hideTimer);
  document.getElementById('status')?.replaceChildren();
}

/** Says something to everyone: shown for a few seconds, and read out by screen readers. */
export function announce(message: string, kind: 'ok' | 'error' = 'ok'): void {
  const status = document.getElementById('status');
  if (status === null) return;
  replace(status, h('p', { class: `notice notice-${kind}` }, message));
  window.clearTimeout(hideTimer);
  hideTimer = window.setTimeout(() => status.replaceChildren(), 6_000);
}
