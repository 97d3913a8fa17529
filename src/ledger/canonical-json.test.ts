import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isOncelyError } from '../errors/index.js';
import { argsDigest, canonicalJson, toJsonValue } from './canonical-json.js';

function refusalOf(value: unknown): string {
  try {
    canonicalJson(value);
  } catch (error) {
    expect(isOncelyError(error, 'TOOL_ARGS_INVALID')).toBe(true);
    return (error as Error).message;
  }
  throw new Error('expected canonicalJson to refuse the value');
}

describe('canonicalJson', () => {
  it('sorts object keys by UTF-16 code units, at every depth, with no whitespace', () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: null }, A: true })).toBe(
      '{"A":true,"a":{"c":null,"d":[3,{"y":2,"z":1}]},"b":1}',
    );
    // By code units, not code points: the emoji's first unit 0xD83D sorts before U+FF5E.
    expect(canonicalJson({ '\uff5e': 1, '\u{1F600}': 2, é: 3, e: 4 })).toBe('{"e":4,"é":3,"😀":2,"～":1}');
  });

  it('keeps array order and writes strings and numbers as JSON does', () => {
    expect(canonicalJson([3, 1, 2])).toBe('[3,1,2]');
    expect(canonicalJson({ s: 'a"b\n', n: 1e21, f: 0.1, neg: -0 })).toBe(
      '{"f":0.1,"n":1e+21,"neg":0,"s":"a\\"b\\n"}',
    );
    expect(canonicalJson('x')).toBe('"x"');
    expect(canonicalJson(null)).toBe('null');
  });

  it('drops undefined object members, as JSON does', () => {
    expect(canonicalJson({ a: undefined, b: 1 })).toBe('{"b":1}');
  });

  it('takes a Date, or anything with toJSON, as JSON would', () => {
    const at = new Date('2024-05-01T12:00:00.000Z');
    expect(canonicalJson({ at })).toBe('{"at":"2024-05-01T12:00:00.000Z"}');
    expect(canonicalJson({ v: { toJSON: () => ({ z: 1, a: 2 }) } })).toBe('{"v":{"a":2,"z":1}}');
  });

  it.each([
    ['NaN', { n: Number.NaN }, /NaN/],
    ['Infinity', { n: Number.POSITIVE_INFINITY }, /Infinity/],
    ['-Infinity', [Number.NEGATIVE_INFINITY], /Infinity/],
    ['a BigInt', { n: 10n }, /bigint/],
    ['a function', { f: () => 1 }, /function/],
    ['a symbol', { s: Symbol('s') }, /symbol/],
    ['undefined in an array', [1, undefined], /undefined/],
    ['undefined itself', undefined, /undefined/],
  ])('refuses %s', (_what, value, message) => {
    expect(refusalOf(value)).toMatch(message);
  });

  // Sparse arrays built without sparse literals (the linter refuses those): holes at 0 and at 1.
  const holeFirst: unknown[] = [];
  holeFirst[1] = 1;
  const holeInside: unknown[] = [1];
  holeInside[2] = 3;

  it.each([
    ['a hole in a sparse array', holeFirst, /\$\[0\].*hole/],
    ['a hole deep inside', { list: holeInside }, /\$\.list\[1\].*hole/],
    ['a Map', { m: new Map([['a', 1]]) }, /\$\.m.*Map/],
    ['a Set', new Set([1, 2]), /\$ .*Set/],
    ['an invalid Date', { at: new Date(Number.NaN) }, /\$\.at.*invalid Date/],
    ['a regular expression', { r: /x/ }, /regular expression/],
    ['a typed array', { b: new Uint8Array([1]) }, /binary/],
    ['undefined inside a nested array', { a: [[undefined]] }, /\$\.a\[0\]\[0\].*undefined/],
  ])('refuses %s, naming where it is (two values must never share a digest)', (_what, value, message) => {
    expect(refusalOf(value)).toMatch(message);
  });

  it('gives two different Maps or Sets no shared digest: both are refused, not written as {}', () => {
    expect(() => argsDigest(new Map([['a', 1]]))).toThrow(/Map/);
    expect(() => argsDigest(new Map([['b', 2]]))).toThrow(/Map/);
    expect(() => argsDigest({ s: new Set(['x']) })).toThrow(/Set/);
  });

  it('refuses a reference cycle, naming where it is', () => {
    const a: Record<string, unknown> = { x: 1 };
    a.self = { back: a };
    expect(refusalOf(a)).toMatch(/\$\.self\.back.*cycle/);
    const list: unknown[] = [];
    list.push(list);
    expect(refusalOf(list)).toMatch(/cycle/);
  });

  it('accepts the same object twice when it is not a cycle', () => {
    const shared = { k: 1 };
    expect(canonicalJson({ a: shared, b: [shared, shared] })).toBe('{"a":{"k":1},"b":[{"k":1},{"k":1}]}');
  });

  it('reads back to itself: canonicalJson(JSON.parse(canonicalJson(v))) === canonicalJson(v)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const text = canonicalJson(value);
        expect(canonicalJson(JSON.parse(text))).toBe(text);
        expect(toJsonValue(value)).toEqual(JSON.parse(text));
      }),
      { numRuns: 500 },
    );
  });

  it('does not depend on the order keys were written in', () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 2 })), (dict) => {
        const reversed = Object.fromEntries(Object.entries(dict).reverse());
        expect(canonicalJson(reversed)).toBe(canonicalJson(dict));
      }),
    );
  });
});

describe('argsDigest', () => {
  it('is the hex SHA-256 of the canonical text, equal for reordered keys', () => {
    const digest = argsDigest({ amountCents: 2500, accountId: 'acct_1' });
    expect(digest).toMatch(/^[0-9a-f]{64}$/);
    expect(argsDigest({ accountId: 'acct_1', amountCents: 2500 })).toBe(digest);
    expect(argsDigest({ nested: { b: 1, a: 2 } })).toBe(argsDigest({ nested: { a: 2, b: 1 } }));
  });

  it('differs for different values', () => {
    const digests = [
      argsDigest({ accountId: 'acct_1', amountCents: 2500 }),
      argsDigest({ accountId: 'acct_1', amountCents: 2501 }),
      argsDigest({ accountId: 'acct_1', amountCents: '2500' }),
      argsDigest({ accountId: 'acct_1' }),
      argsDigest([1, 2]),
      argsDigest([2, 1]),
      argsDigest(null),
      argsDigest({}),
    ];
    expect(new Set(digests).size).toBe(digests.length);
  });

  it('refuses what canonicalJson refuses', () => {
    expect(() => argsDigest({ n: Number.NaN })).toThrow(/NaN/);
  });
});
