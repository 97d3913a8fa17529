import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isOncelyError } from '../errors/index.js';
import {
  backoffDelay,
  destructive,
  external,
  MAX_READ_ATTEMPTS,
  read,
  write,
  type Effect,
} from './effects.js';

function errorOf(work: () => unknown): { code: string; message: string } {
  try {
    work();
  } catch (error) {
    if (isOncelyError(error)) return { code: error.code, message: error.message };
    throw error;
  }
  throw new Error('expected an error');
}

describe('read()', () => {
  it('allows 1 to 3 attempts, 3 by default', () => {
    expect(MAX_READ_ATTEMPTS).toBe(3);
    expect(read()).toMatchObject({ kind: 'read', attempts: 3, approval: false });
    for (const attempts of [1, 2, 3]) expect(read({ attempts }).attempts).toBe(attempts);
  });

  it.each([0, 4, 1.5, -1, Number.NaN])('refuses %s attempts', (attempts) => {
    const error = errorOf(() => read({ attempts }));
    expect(error.code).toBe('TOOL_DEFINITION_INVALID');
    expect(error.message).toMatch(/1 to 3 attempts/);
  });

  it('takes the backoff it is given and refuses a bad one', () => {
    expect(read({ baseDelayMs: 5, maxDelayMs: 50 }).backoff).toEqual({ baseDelayMs: 5, maxDelayMs: 50 });
    expect(read().backoff).toEqual({ baseDelayMs: 100, maxDelayMs: 2_000 });
    for (const bad of [-1, 1.5, 60_001]) {
      expect(errorOf(() => read({ baseDelayMs: bad })).code).toBe('TOOL_DEFINITION_INVALID');
      expect(errorOf(() => read({ maxDelayMs: bad })).code).toBe('TOOL_DEFINITION_INVALID');
    }
  });

  it('is frozen', () => {
    const effect = read();
    expect(Object.isFrozen(effect)).toBe(true);
    expect(Object.isFrozen(effect.backoff)).toBe(true);
  });
});

describe.each([
  ['write', write],
  ['external', external],
  ['destructive', destructive],
] as const)('%s()', (kind, make) => {
  it('gets exactly one attempt', () => {
    expect(make()).toMatchObject({ kind, attempts: 1, approval: false });
    expect(make({ attempts: 1 }).attempts).toBe(1);
  });

  it.each([2, 3, 0])('refuses attempts: %s, saying to remove it', (attempts) => {
    const error = errorOf(() => make({ attempts }));
    expect(error.code).toBe('TOOL_DEFINITION_INVALID');
    expect(error.message).toContain(`remove attempts: ${attempts}`);
    expect(error.message).toMatch(/exactly one attempt/);
  });
});

describe('approval', () => {
  it('is off unless asked for, on external and destructive', () => {
    expect(external({ approval: true }).approval).toBe(true);
    expect(destructive({ approval: true }).approval).toBe(true);
    expect(external().approval).toBe(false);
  });

  it('refuses a non-boolean', () => {
    expect(errorOf(() => external({ approval: 'yes' as unknown as boolean })).code).toBe(
      'TOOL_DEFINITION_INVALID',
    );
  });
});

describe('backoffDelay', () => {
  const effect = (baseDelayMs: number, maxDelayMs: number): Effect => read({ baseDelayMs, maxDelayMs });

  it('spans [0, min(max, base * 2^n)) with full jitter', () => {
    const e = effect(100, 2_000);
    expect(backoffDelay(e, 0, () => 0)).toBe(0);
    expect(backoffDelay(e, 0, () => 0.5)).toBe(50);
    expect(backoffDelay(e, 2, () => 0.999_999)).toBe(399);
    expect(backoffDelay(e, 10, () => 0.999_999)).toBe(1_999);
  });

  it('stays within [0, min(max, base * 2^n)) for any base, max, retry and random draw', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 60_000 }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.integer({ min: 0, max: 40 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (base, max, retry, draw) => {
          const delay = backoffDelay(effect(base, max), retry, () => draw);
          const ceiling = Math.min(max, base * 2 ** retry);
          expect(Number.isInteger(delay)).toBe(true);
          expect(delay).toBeGreaterThanOrEqual(0);
          if (ceiling === 0) expect(delay).toBe(0);
          else expect(delay).toBeLessThan(ceiling);
        },
      ),
    );
  });

  it('is 0 for a write, which is never retried', () => {
    expect(backoffDelay(write(), 0, () => 0.9)).toBe(0);
  });
});
