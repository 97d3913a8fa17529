import { describe, expect, it } from 'vitest';
import { REPLAN_FROM, prepared } from './prepared.js';

describe('prepared', () => {
  it('names a statement anew (so it is planned again) each time its executions double past REPLAN_FROM', () => {
    const names: string[] = [];
    for (let i = 1; i <= REPLAN_FROM * 4; i++) names.push(prepared('oncely_test', 'SELECT 1').name);
    const changes = names.flatMap((name, i) => (i > 0 && name !== names[i - 1] ? [i + 1] : []));
    expect(changes).toEqual([REPLAN_FROM, REPLAN_FROM * 2, REPLAN_FROM * 4]);
    expect(names[0]).toBe('oncely_test_1_1');
    expect(names.at(-1)).toBe('oncely_test_1_4');
  });
});
