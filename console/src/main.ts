import { api, forgetKey, inboxEvents, keepKey, storedKey, ApiError, type Me } from './api.js';
import { approvalView } from './approval.js';
import { callView } from './call.js';
import type { View } from './common.js';
import { announce, clearAnnouncements, h, replace } from './dom.js';
import { inboxView } from './inbox.js';
import { incidentsView } from './incidents.js';
import { runView, runsView } from './runs.js';
import { applyTheme, themeSwitch } from './theme.js';
import { workersView } from './workers.js';
import { workflowView, workflowsView } from './workflows.js';

/*
 * The console's shell: sign-in, the top bar with live counts, and a router on the URL's hash
 * (#/inbox, #/incidents, #/calls/<key>, #/approvals/<key>, #/runs, #/runs/<id>, #/workflows,
 * #/workflows/<id>, #/workers). The hash names only
 * what is shown, never a secret.
 */

const main = document.getElementById('main') as HTMLElement;
const top = document.getElementById('top') as HTMLElement;

let me: Me | undefined;
/** The open view's cleanup (timers, streams), run before the next one opens. */
let closeView: (() => void) | undefined;
let inboxStream: AbortController | undefined;

function signInView(message?: string): void {
  top.hidden = true;
  const input = h('input', {
    id: 'api-key',
    name: 'api-key',
    type: 'password',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
    'aria-describedby': 'api-key-help',
  });
  const form = h(
    'form',
    { class: 'sign-in', 'aria-labelledby': 'sign-in-title' },
    h('h1', { id: 'sign-in-title' }, 'Sign in to the oncely console'),
    h('label', { for: 'api-key' }, 'API key'),
    input,
    h(
      'p',
      { id: 'api-key-help', class: 'help' },
      'A key from ',
      h('code', {}, 'oncely keys create'),
      '. It is kept in this tab only and sent with each request; close the tab or sign out to forget it.',
    ),
    message === undefined ? null : h('p', { class: 'notice notice-error', role: 'alert' }, message),
    h('button', { type: 'submit' }, 'Sign in'),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void signIn(input.value.trim());
  });
  replace(main, form);
  input.focus();
}

async function signIn(key: string): Promise<void> {
  try {
    me = await api<Me>('GET', '/v1/me', undefined, key);
    keepKey(key);
    if (location.hash === '' || location.hash === '#/') location.hash = '#/inbox';
    render();
  } catch (error) {
    signInView(
      error instanceof ApiError && error.status === 401
        ? 'That key was not accepted (unknown or revoked).'
        : `Could not sign in: ${(error as Error).message}`,
    );
  }
}

function signOut(): void {
  forgetKey();
  me = undefined;
  inboxStream?.abort();
  closeView?.();
  closeView = undefined;
  location.hash = '';
  signInView();
}

function topBar(who: Me): void {
  const nav = h(
    'nav',
    { 'aria-label': 'Console' },
    h(
      'a',
      { href: '#/inbox' },
      'Inbox ',
      h('span', { id: 'count-inbox', class: 'count', 'aria-label': 'items' }),
    ),
    h('a', { href: '#/incidents' }, 'Incidents'),
    h('a', { href: '#/runs' }, 'Runs'),
    h('a', { href: '#/workflows' }, 'Workflows'),
    h('a', { href: '#/workers' }, 'Workers'),
  );
  replace(
    top,
    h('a', { class: 'brand', href: '#/inbox' }, 'oncely'),
    nav,
    h(
      'p',
      { class: 'who' },
      h('span', {}, who.actor_id),
      ' · ',
      h('span', { class: 'role' }, who.role),
      ' · tenant ',
      h('span', {}, who.tenant_id),
    ),
    themeSwitch(),
    h('button', { type: 'button', class: 'secondary', onclick: signOut }, 'Sign out'),
  );
  top.hidden = false;
  followInbox();
}

/**
 * The inbox's count in the top bar, pushed by the server (`/v1/inbox/events`) as it changes; each
 * change is also told to the open view (the inbox reloads its lists). A lost stream is opened again.
 */
function followInbox(): void {
  inboxStream?.abort();
  const stream = new AbortController();
  inboxStream = stream;
  void (async () => {
    for (let failures = 0; !stream.signal.aborted;) {
      try {
        for await (const counts of inboxEvents(stream.signal)) {
          failures = 0;
          const n = counts.unknown + counts.conflicts + counts.pending_approvals;
          const count = document.getElementById('count-inbox');
          // Nothing waiting shows no badge at all (an empty count is hidden), never a red 0.
          if (count !== null) count.textContent = n === 0 ? '' : `${n}${counts.capped ? '+' : ''}`;
          window.dispatchEvent(new CustomEvent('oncely:inbox', { detail: counts }));
        }
      } catch (error) {
        if (stream.signal.aborted) return;
        if (error instanceof ApiError && error.status === 401) return signOut();
        failures++;
      }
      await new Promise((resolve) => window.setTimeout(resolve, Math.min(30_000, 1_000 * 2 ** failures)));
    }
  })();
}

/** Asks the open view to look again (after an action of this page). */
function refreshCounts(): void {
  window.dispatchEvent(new CustomEvent('oncely:inbox'));
}

function route(): { view: View; args: string[] } {
  const parts = location.hash.replace(/^#\/?/, '').split('?')[0]!.split('/').map(decodeURIComponent);
  const [page, ...rest] = parts;
  switch (page) {
    case 'incidents':
      return { view: incidentsView, args: [] };
    case 'calls':
      return { view: callView, args: [rest.join('/')] };
    case 'approvals':
      return { view: approvalView, args: [rest.join('/')] };
    case 'runs':
      return rest.length > 0 ? { view: runView, args: [rest.join('/')] } : { view: runsView, args: [] };
    case 'workflows':
      return rest.length > 0
        ? { view: workflowView, args: [rest.join('/')] }
        : { view: workflowsView, args: [] };
    case 'workers':
      return { view: workersView, args: [] };
    default:
      return { view: inboxView, args: [] };
  }
}

function render(): void {
  if (me === undefined) return;
  if (top.hidden) topBar(me);
  closeView?.();
  closeView = undefined;
  // A toast belongs to the page that raised it: it does not follow the operator to the next one.
  clearAnnouncements();
  const { view, args } = route();
  for (const a of top.querySelectorAll('nav a')) {
    const current = location.hash.startsWith(a.getAttribute('href') ?? '#none');
    if (current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  replace(main, h('p', {}, 'Loading…'));
  view(main, { me, args, refreshCounts })
    .then((close) => {
      closeView = close;
      main.focus({ preventScroll: true });
    })
    .catch((error: unknown) => {
      if (error instanceof ApiError && error.status === 401) return signOut();
      const message =
        error instanceof ApiError && error.status === 404
          ? `Not found: ${error.message}`
          : `Something went wrong: ${(error as Error).message}`;
      replace(
        main,
        h('h1', {}, 'Not shown'),
        h('p', { class: 'notice notice-error', role: 'alert' }, message),
      );
      announce(message, 'error');
    });
}

applyTheme();
window.addEventListener('hashchange', render);

const key = storedKey();
if (key === null) signInView();
else void signIn(key);
