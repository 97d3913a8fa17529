import { h } from './dom.js';

/*
 * Light or dark: the system's choice (`prefers-color-scheme`) until the operator picks one with the
 * switch, which is remembered in this browser (localStorage; it is no secret).
 */

const STORAGE = 'oncely.console.theme';
const dark = window.matchMedia('(prefers-color-scheme: dark)');

type Theme = 'light' | 'dark';

function chosen(): Theme | null {
  const value = localStorage.getItem(STORAGE);
  return value === 'light' || value === 'dark' ? value : null;
}

const shown = (): Theme => chosen() ?? (dark.matches ? 'dark' : 'light');

/** Sets the page's theme from the remembered choice (none: the system's, which the stylesheet follows). */
export function applyTheme(): void {
  const theme = chosen();
  if (theme === null) document.documentElement.removeAttribute('data-theme');
  else document.documentElement.setAttribute('data-theme', theme);
}

/** A switch between light and dark, pressed while dark is shown. */
export function themeSwitch(): HTMLButtonElement {
  const button = h('button', { type: 'button', class: 'secondary', id: 'theme-switch' }, 'Dark theme');
  const sync = (): void => button.setAttribute('aria-pressed', String(shown() === 'dark'));
  button.addEventListener('click', () => {
    localStorage.setItem(STORAGE, shown() === 'dark' ? 'light' : 'dark');
    applyTheme();
    sync();
  });
  dark.addEventListener('change', sync);
  sync();
  return button;
}

applyTheme();
