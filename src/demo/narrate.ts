import type { CallStory, ScenarioReport } from './facts.js';

/*
 * The demo's words: for each scenario the ledger record's transitions with actors and reasons, what
 * the operator did, what the model heard and said, the billing service's own count, and every fact
 * checked; then a summary table.
 */

const WIDTH = 96;

export function narrateScenario(report: ScenarioReport): string {
  const lines = [rule(`${report.number}. ${report.title}`), `run ${report.runId} → ${report.runStatus}`];
  for (const call of report.calls) lines.push(...callLines(call));
  for (const action of report.operator) lines.push(`operator (HTTP API): ${action}`);
  for (const heard of report.heard) {
    lines.push(`model heard (${heard.toolName}): ${clip(JSON.stringify(withoutNote(heard.value)))}`);
  }
  if (report.answer !== '') lines.push(`model said: ${clip(report.answer)}`);
  const b = report.billing;
  lines.push(
    `billing service: ${b.credits} credit(s) applied, ${b.standing} standing, ${b.voids} void request(s)`,
  );
  for (const f of report.facts) {
    lines.push(
      `${f.ok ? '  ✓' : '  ✗'} ${f.what}${f.ok ? '' : `\n      expected ${JSON.stringify(f.expected)}\n      found    ${JSON.stringify(f.actual)}`}`,
    );
  }
  return lines.join('\n');
}

function callLines(call: CallStory): string[] {
  const head = `${call.toolName} ${call.key} (attempt ${call.attempt}) → ${call.status}`;
  return [
    head,
    ...call.history.map((e) => {
      const state = e.kind === 'transition' ? (e.to ?? '') : `(${e.kind})`;
      return `    ${pad(state, 15)}${pad(e.via ?? '', 11)}${pad(e.actor, 24)}${clip(e.reason ?? '', 46)}`;
    }),
  ];
}

export function summaryTable(reports: readonly ScenarioReport[]): string {
  const rows = reports.map((r) => [
    String(r.number),
    r.title,
    r.calls
      .filter((c) => !c.key.endsWith(':compensation'))
      .map((c) => c.status)
      .join(', '),
    r.heard.map((h) => h.status).join(', '),
    `${r.billing.standing}/${r.billing.credits}`,
    `${r.facts.filter((f) => f.ok).length}/${r.facts.length}${r.facts.every((f) => f.ok) ? ' ✓' : ' ✗'}`,
  ]);
  const header = ['#', 'scenario', 'ledger', 'model heard', 'credits standing/applied', 'facts'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => pad(c, (widths[i] ?? 0) + 2))
      .join('')
      .trimEnd();
  return [rule('summary'), line(header), ...rows.map(line)].join('\n');
}

function withoutNote(value: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(value).filter(([key]) => key !== 'note'));
}

function rule(title: string): string {
  return `\n── ${title} ${'─'.repeat(Math.max(3, WIDTH - title.length - 4))}`;
}

function pad(text: string, width: number): string {
  return text.length >= width ? `${text} ` : text + ' '.repeat(width - text.length);
}

function clip(text: string, max = WIDTH): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
