import { describe, expect, it } from 'vitest';
import { jsonProblem } from './json-value.js';

/** `containers` arrays and objects, one inside the other, around a number. */
function nested(containers: number): unknown {
  let value: unknown = 1;
  for (let i = 0; i < containers; i++) value = i % 2 === 0 ? [value] : { v: value };
  return value;
}

describe('jsonProblem', () => {
  it('accepts any JSON with up to 64 nested arrays and objects', () => {
    for (const value of [null, 0, '', 'é😀', [], {}, { a: [1, { b: null }] }, nested(64)]) {
      expect(jsonProblem(value)).toBeUndefined();
    }
  });

  it('refuses a missing value, a number JSON cannot carry, and deeper nesting', () => {
    expect(jsonProblem(undefined)).toBe('is required');
    expect(jsonProblem({ n: [Number.POSITIVE_INFINITY] })).toBe('holds a number JSON cannot carry');
    expect(jsonProblem(JSON.parse('{"n":1e999}'))).toBe('holds a number JSON cannot carry');
    expect(jsonProblem(nested(65))).toBe('is nested deeper than 64 levels');
  });

  it('does not overflow the stack on hostile nesting', () => {
    expect(jsonProblem(nested(200_000))).toBe('is nested deeper than 64 levels');
  });
});
