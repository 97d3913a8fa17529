import { describe, expect, it } from 'vitest';
import { printable } from './table.js';

describe('printable', () => {
  it('shows control characters instead of letting a terminal obey them', () => {
    expect(printable('checked \u001b[2J\u001b[31mall clear\u0007')).toBe(
      'checked \\u001b[2J\\u001b[31mall clear\\u0007',
    );
    expect(printable('line one\roverwritten')).toBe('line one\\u000doverwritten');
    expect(printable('\u009b31m and \u2028')).toBe('\\u009b31m and \\u2028');
  });

  it('keeps newlines, tabs and every printable character', () => {
    const text = 'KEY\tSTATUS\nrun_1:call_2  failed  é 😀 ～\n';
    expect(printable(text)).toBe(text);
  });
});
