/*
 * The Heist page, its stylesheet and its script, served from memory by heistRoutes. The script builds
 * the page with textContent only (nothing the server answers is ever read as HTML).
 */

export const HEIST_PAGE = `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>Heist the Agent</title>
    <link rel="stylesheet" href="/heist/style.css" />
  </head>
  <body>
    <header>
      <h1>Heist the Agent</h1>
      <p>
        Penny is a refund bot on oncely: every refund she makes goes through its ledger. Beside her, a naive
        bot does the same job with a plain retry loop. Each level, pull a trick to get more money out of them
        than you are owed. Every trick is real: a payments service on a loopback port keeps the books, the
        bots are real processes, crashes are real SIGKILLs.
      </p>
    </header>
    <p id="hud" data-testid="hud">
      Score <strong data-testid="hud-score">0</strong> &middot; Time <strong data-testid="hud-time">0:00</strong>
      &middot; Best <strong data-testid="hud-best">-</strong>
    </p>
    <main>
      <p id="status" role="status"></p>
      <section id="result" hidden></section>
      <section id="level" aria-live="polite"></section>
      <section id="score" hidden></section>
    </main>
    <script type="module" src="/heist/app.js"></script>
  </body>
</html>
`;

export const HEIST_STYLE = `
:root { color-scheme: light dark; --ink: #1d1d1f; --paper: #fbfaf7; --muted: #6b6b70; --bad: #b3261e; --good: #1b6e3a; --line: #d8d6cf; }
@media (prefers-color-scheme: dark) { :root { --ink: #ececec; --paper: #16161a; --muted: #a0a0a8; --bad: #ff8a80; --good: #7bd88f; --line: #3a3a40; } }
body { font: 16px/1.5 system-ui, sans-serif; color: var(--ink); background: var(--paper); margin: 0 auto; max-width: 60rem; padding: 1rem 1.5rem 4rem; }
h1 { letter-spacing: 0.3em; text-transform: uppercase; font-size: 1.6rem; }
h2 { font-size: 1.3rem; margin-bottom: 0.25rem; }
h3 { font-size: 1.05rem; margin: 1.2rem 0 0.3rem; }
.goal { font-weight: 600; }
.tricks { list-style: none; padding: 0; }
.tricks li { border: 1px solid var(--line); border-radius: 8px; padding: 0.6rem 0.8rem; margin: 0.5rem 0; }
.tricks p { margin: 0.2rem 0 0; color: var(--muted); }
button { font: inherit; padding: 0.35rem 0.9rem; border-radius: 6px; border: 1px solid var(--line); background: transparent; color: inherit; cursor: pointer; }
button:disabled { opacity: 0.5; cursor: default; }
button.primary { border-color: currentColor; font-weight: 600; }
table { border-collapse: collapse; margin: 0.5rem 0; }
th, td { text-align: left; padding: 0.25rem 1rem 0.25rem 0; border-bottom: 1px solid var(--line); vertical-align: top; }
.heist { color: var(--bad); font-weight: 700; }
.held { color: var(--good); font-weight: 600; }
.columns { display: grid; grid-template-columns: 1fr 1fr; gap: 1.5rem; }
@media (max-width: 44rem) { .columns { grid-template-columns: 1fr; } }
.story { font-family: ui-monospace, monospace; font-size: 0.85rem; white-space: pre-wrap; }
.story .who { color: var(--muted); }
code, .key { font-family: ui-monospace, monospace; font-size: 0.85rem; overflow-wrap: anywhere; }
#status { color: var(--muted); min-height: 1.5em; }
main section { scroll-margin-top: 3rem; }
#hud { position: sticky; top: 0; background: var(--paper); border-bottom: 1px solid var(--line); padding: 0.4rem 0; margin: 0; }
select { font: inherit; margin-left: 0.5rem; max-width: 100%; }
.question { display: block; margin-top: 0.4rem; }
.quote { font-family: ui-monospace, monospace; font-size: 0.85rem; white-space: pre-wrap; overflow-wrap: anywhere; border-left: 3px solid var(--good); padding: 0.3rem 0.8rem; margin: 0.4rem 0; }
.points { font-weight: 700; }
`;

export const HEIST_SCRIPT = `
const $ = (id) => document.getElementById(id);
let game = null;
// The clock: the game's time when the server last answered, and when that was here.
let clock = { ms: 0, at: Date.now(), running: false };
const BEST = 'oncely-heist-best';

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (name === 'onclick') node.addEventListener('click', value);
    else if (name === 'class') node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children.flat()) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

const dollars = (cents) => '$' + (cents / 100).toFixed(2);
const standing = (payouts) => payouts.filter((p) => !p.voided);
const paid = (payouts) => standing(payouts).length + ' (' + dollars(standing(payouts).reduce((n, p) => n + p.amountCents, 0)) + ')';

async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer?.error?.message ?? 'HTTP ' + response.status);
  return answer;
}

function status(text) { $('status').textContent = text; }

const clockText = (ms) => { const s = Math.floor(ms / 1000); return Math.floor(s / 60) + ':' + String(s % 60).padStart(2, '0'); };

function bests() {
  try { const kept = JSON.parse(localStorage.getItem(BEST) ?? '[]'); return Array.isArray(kept) ? kept : []; } catch { return []; }
}

// Keeps a finished game's score among this browser's five best; answers whether it is the best.
function remember(score) {
  const entry = { score: score.score, cleared: score.levelsCleared, levels: score.levels, seconds: Math.floor(score.elapsedMs / 1000), at: new Date().toISOString() };
  const list = [...bests(), entry].sort((a, b) => b.score - a.score || a.seconds - b.seconds).slice(0, 5);
  localStorage.setItem(BEST, JSON.stringify(list));
  return list[0] === entry;
}

function hud() {
  const ms = clock.running ? clock.ms + (Date.now() - clock.at) : clock.ms;
  document.querySelector('[data-testid="hud-time"]').textContent = clockText(ms);
  document.querySelector('[data-testid="hud-score"]').textContent = String(game?.scoreboard.score ?? 0);
  const best = bests()[0];
  document.querySelector('[data-testid="hud-best"]').textContent = best === undefined ? '-' : String(best.score);
}

// A new answer from the server: the game, and its clock.
function tick(answer) {
  game = answer;
  clock = { ms: game.over ? game.scoreboard.elapsedMs : game.elapsedMs, at: Date.now(), running: !game.over };
  hud();
}
setInterval(hud, 500);

function showLevel() {
  const section = $('level');
  section.replaceChildren();
  if (game.over || game.level === null) { showScore(); return; }
  const level = game.level;
  section.append(
    el('h2', {}, 'Level ' + level.number + ' of ' + game.levels + ' \\u00b7 ' + level.title),
    el('p', { class: 'goal' }, 'Goal: ' + level.goalText),
    el('p', {}, level.scene),
    el('p', { 'data-testid': 'tricks-left' }, 'Tricks left: ' + game.tricksLeft + (game.cleared ? ' (cleared)' : '')),
    el('ul', { class: 'tricks' }, level.tricks.map((t) =>
      el('li', {},
        el('button', { class: 'primary', 'data-trick': t.id, onclick: () => play(t.id), ...(game.tricksLeft > 0 ? {} : { disabled: '' }) }, t.name),
        el('p', {}, t.how),
        t.question === null ? [] : el('label', { class: 'question' }, t.question.prompt,
          el('select', { 'data-choice': t.id }, t.question.choices.map((c) =>
            el('option', { value: c.id, ...(c.id === t.question.preset ? { selected: '' } : {}) }, c.label))))))),
    el('button', { onclick: next, 'data-action': 'next' }, game.lastLevel ? 'Finish and see the score' : 'Next level'),
  );
}

function story(lines, bot) {
  return el('div', { class: 'story' }, lines.map((l) =>
    el('div', {}, el('span', { class: 'who' }, (l.who === 'bot' ? bot : l.who === 'customer' ? 'you' : l.who) + ': '), l.text)));
}

// The approvals Penny's run asked for: a repeat names the earlier call it repeats.
function approvals(list) {
  if (list.length === 0) return [];
  return [
    el('h3', {}, "Approvals Penny's run asked for"),
    el('ul', { 'data-testid': 'penny-approvals' }, list.map((a) => el('li', {},
      a.tool + ' ' + JSON.stringify(a.args) + ' \\u2192 ' + a.status + (a.decidedBy === null ? '' : ' by ' + a.decidedBy),
      el('div', { class: 'key' }, 'key ' + a.key),
      a.repeatOf === null ? [] : el('div', {}, 'a repeat of ', el('span', { class: 'key' }, a.repeatOf)),
      a.reason === null ? [] : el('div', {}, 'reason: ' + a.reason)))),
  ];
}

function showResult(play) {
  const { naive, penny } = play;
  const verdict = (met) => el('span', { class: met ? 'heist' : 'held' }, met ? 'YES \\u2014 heist!' : 'no');
  const books = (r) => r.payouts.length === 0 ? [el('li', {}, 'nothing paid')] : r.payouts.map((p) =>
    el('li', {}, el('span', { class: 'key' }, p.paymentId), ' ' + dollars(p.amountCents) + ' order ' + p.order + (p.voided ? ' (voided)' : '') + ' \\u00b7 key ', el('span', { class: 'key' }, p.key ?? 'none')));
  const section = $('result');
  section.hidden = false;
  const stopped = penny.stoppedBy;
  section.replaceChildren(
    el('h2', {}, 'Result \\u00b7 ' + play.name),
    play.choiceLabel === null ? [] : el('p', { 'data-testid': 'play-choice' }, 'Your choice: ' + play.choiceLabel),
    el('p', { class: 'points', 'data-testid': 'play-points' }, (play.points > 0 ? '+' + play.points : 'No') + ' points' + (naive.goalMet ? '' : ': the trick did not work on the naive bot either')),
    el('table', { 'data-testid': 'outcome' },
      el('tr', {}, el('th', {}, ''), el('th', {}, 'naive bot'), el('th', {}, 'Penny on oncely')),
      el('tr', {}, el('td', {}, 'refunds paid'), el('td', { 'data-testid': 'naive-paid' }, paid(naive.payouts)), el('td', { 'data-testid': 'penny-paid' }, paid(penny.payouts))),
      el('tr', {}, el('td', {}, 'refunds it recorded'), el('td', {}, String(naive.recorded)), el('td', {}, String(penny.recorded))),
      el('tr', {}, el('td', {}, 'approved'), el('td', {}, naive.approvedCents === null ? '-' : dollars(naive.approvedCents)), el('td', {}, penny.approvedCents === null ? '-' : dollars(penny.approvedCents))),
      el('tr', {}, el('td', {}, 'goal reached'), el('td', { 'data-testid': 'naive-goal' }, verdict(naive.goalMet)), el('td', { 'data-testid': 'penny-goal' }, verdict(penny.goalMet)))),
    ...[naive, penny].filter((r) => r.error).map((r) => el('p', { class: 'heist' }, 'The ' + r.bot + ' play broke: ' + r.error)),
    el('h3', {}, 'What stopped you'),
    el('div', { 'data-testid': 'stopped-by' }, stopped === null ? el('p', {}, 'Penny made no call this time.') : [
      el('p', {}, stopped.rule),
      el('div', { class: 'quote', 'data-testid': 'stopped-quote' }, stopped.quote.join('\\n'))]),
    el('h3', {}, 'Why it did not work on Penny'),
    el('p', {}, play.lesson),
    el('div', { class: 'columns' },
      el('div', {}, el('h3', {}, 'The naive bot'), story(naive.lines, 'naive bot')),
      el('div', {}, el('h3', {}, 'Penny'), story(penny.lines, 'Penny'))),
    el('h3', {}, "Penny's ledger"),
    el('ul', {}, penny.ledger.map((c) => el('li', {},
      c.tool + ' ' + JSON.stringify(c.args) + ' \\u2192 ' + c.status + ' (attempt ' + c.attempt + ')',
      el('div', { class: 'key' }, 'key ' + c.key),
      el('ol', {}, c.history.map((h) => el('li', {}, h)))))),
    el('h3', {}, "What Penny's model heard"),
    el('ul', {}, penny.heard.map((h) => el('li', {}, h))),
    ...approvals(penny.approvals),
    el('h3', {}, "The payments service's books"),
    el('div', { class: 'columns' },
      el('div', {}, el('strong', {}, 'naive bot'), el('ul', { 'data-testid': 'naive-books' }, books(naive))),
      el('div', {}, el('strong', {}, 'Penny'), el('ul', { 'data-testid': 'penny-books' }, books(penny)))),
  );
}

function showScore() {
  const s = game.scoreboard;
  const best = remember(s);
  hud();
  const section = $('score');
  section.hidden = false;
  const row = (name, value, id) => el('tr', {}, el('td', {}, name), el('td', { 'data-testid': id }, String(value)));
  section.replaceChildren(
    el('h2', {}, 'Scoreboard'),
    el('p', { class: 'points', 'data-testid': 'score-total' }, 'Score ' + s.score + ' in ' + clockText(s.elapsedMs) + (best ? ' \\u2014 your best!' : '')),
    el('table', {},
      row('Tricks tried', s.tricksTried, 'score-tricks'),
      row('Levels cleared', s.levelsCleared + ' of ' + s.levels, 'score-cleared'),
      row('Refunds owed', s.refundsOwed, 'score-owed'),
      row('Paid out by the naive bot', s.naivePayouts, 'score-naive'),
      row('Paid out by Penny', s.pennyPayouts, 'score-penny'),
      row('Heists that worked on Penny', s.pennyGoalsMet, 'score-penny-goals')),
    el('p', { 'data-testid': 'score-verdict' }, s.verdict),
    el('h3', {}, 'Best scores in this browser'),
    el('ol', { 'data-testid': 'best-scores' }, bests().map((b) => el('li', {}, b.score + ' points \\u00b7 ' + b.cleared + ' of ' + b.levels + ' levels \\u00b7 ' + clockText(b.seconds * 1000) + ' \\u00b7 ' + b.at.slice(0, 10)))),
    el('button', { onclick: start }, 'Play again'),
  );
}

function busy(on) {
  for (const button of document.querySelectorAll('button')) button.disabled = on || (button.dataset.trick !== undefined && game.tricksLeft <= 0);
}

async function play(trick) {
  const choice = document.querySelector('select[data-choice="' + trick + '"]')?.value;
  busy(true);
  status('Playing the trick against the naive bot, then against Penny\\u2026');
  try {
    const answer = await call('POST', '/heist/api/games/' + game.gameId + '/plays', choice === undefined ? { trick } : { trick, choice });
    tick(answer.game);
    status('');
    showResult(answer.play);
    if (game.tricksLeft <= 0 || game.cleared) { tick(await call('POST', '/heist/api/games/' + game.gameId + '/next')); }
    showLevel();
  } catch (error) {
    status(error.message);
    busy(false);
  }
}

async function next() {
  busy(true);
  try {
    tick(await call('POST', '/heist/api/games/' + game.gameId + '/next'));
    $('result').hidden = true;
    showLevel();
  } catch (error) {
    status(error.message);
    busy(false);
  }
}

async function start() {
  $('score').hidden = true;
  $('result').hidden = true;
  tick(await call('POST', '/heist/api/games'));
  showLevel();
}

start().catch((error) => status(error.message));
`;
