/** A plain text table: a header, then one row per item, columns padded to their widest cell. */
export function renderTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n') + '\n';
}

/** "3m ago"-style age of an ISO time, for tables. */
export function age(iso: string | null, now = Date.now()): string {
  if (iso === null) return '-';
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)}h${Math.floor((seconds % 3600) / 60)}m`;
  return `${Math.floor(seconds / 86_400)}d${Math.floor((seconds % 86_400) / 3600)}h`;
}

/** A cell of at most `max` characters. */
export function clip(text: string | null | undefined, max = 60): string {
  if (text === null || text === undefined || text === '') return '-';
  const flat = text.replace(/\s+/g, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** Writes `value` as JSON (for `--json`) or the text a person reads. */
export function output(json: boolean | undefined, value: unknown, text: () => string): void {
  process.stdout.write(json === true ? `${JSON.stringify(value, null, 2)}\n` : printable(text()));
}

/**
 * Text safe to print on a terminal: control characters other than newline and tab (an escape
 * sequence in an operator's reason, a carriage return that overwrites a line) are shown as `\u001b`
 * and the like instead of being obeyed.
 */
export function printable(text: string): string {
  return text.replace(UNPRINTABLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** C0 controls but tab and newline, DEL, C1 controls, and the Unicode line and paragraph separators. */
// eslint-disable-next-line no-control-regex -- finding control characters is the point
const UNPRINTABLE = new RegExp('[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f\\u2028\\u2029]', 'g');
