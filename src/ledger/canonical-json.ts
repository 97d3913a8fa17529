import { createHash } from 'node:crypto';
import { OncelyError } from '../errors/index.js';
import type { JsonValue } from './record.js';

/**
 * The canonical JSON text of a value (RFC 8785 style): object keys sorted by UTF-16 code units, no
 * whitespace, numbers and strings as `JSON.stringify` writes them. A valid Date is taken as its ISO
 * string, and any other value with a `toJSON` as JSON would take it. Anything JSON cannot carry
 * faithfully is refused with `TOOL_ARGS_INVALID` naming its path, so two different values never share
 * a text: NaN, Infinity, a BigInt, a function, a symbol, `undefined` in an array, a hole in a sparse
 * array, a Map, a Set, an invalid Date, a regular expression, binary data, a cycle.
 */
export function canonicalJson(value: unknown): string {
  return write(value, new Set(), '$');
}

function write(value: unknown, seen: Set<object>, path: string): string {
  if (value !== null && typeof value === 'object') {
    const refused = refusedObject(value);
    if (refused !== undefined) throw notJson(path, refused);
    if ('toJSON' in value) {
      const toJSON = value.toJSON;
      if (typeof toJSON === 'function') value = (toJSON as () => unknown).call(value);
    }
  }
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw notJson(path, `the number ${String(value)}`);
      return JSON.stringify(value);
    case 'object':
      if (value === null) return 'null';
      return writeContainer(value, seen, path);
    default:
      throw notJson(path, `a value of type ${typeof value}`);
  }
}

/** Objects whose JSON text would lose what they hold (a Map becomes `{}`), or that have none. */
function refusedObject(value: object): string | undefined {
  if (value instanceof Map) return 'a Map (JSON writes it as {}); pass a plain object';
  if (value instanceof Set) return 'a Set (JSON writes it as {}); pass an array';
  if (value instanceof WeakMap || value instanceof WeakSet) return 'a WeakMap or WeakSet';
  if (value instanceof RegExp) return 'a regular expression (JSON writes it as {}); pass its source';
  if (value instanceof Date && Number.isNaN(value.getTime()))
    return 'an invalid Date (JSON writes it as null); pass an ISO date string';
  if (ArrayBuffer.isView(value) && !(typeof Buffer !== 'undefined' && Buffer.isBuffer(value)))
    return 'binary data (a typed array); pass a base64 string or an array of numbers';
  if (value instanceof ArrayBuffer) return 'an ArrayBuffer; pass a base64 string';
  if (value instanceof Promise) return 'a Promise; await it first';
  return undefined;
}

function writeContainer(value: object, seen: Set<object>, path: string): string {
  if (seen.has(value)) throw notJson(path, 'a reference cycle');
  seen.add(value);
  try {
    if (Array.isArray(value)) return writeArray(value as unknown[], seen, path);
    const entries = Object.keys(value)
      .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
      .sort()
      .map(
        (k) => `${JSON.stringify(k)}:${write((value as Record<string, unknown>)[k], seen, `${path}.${k}`)}`,
      );
    return `{${entries.join(',')}}`;
  } finally {
    seen.delete(value);
  }
}

function writeArray(items: unknown[], seen: Set<object>, path: string): string {
  const parts: string[] = [];
  // An index loop, not map(): map() skips the holes of a sparse array, which would write "[,1]".
  for (let i = 0; i < items.length; i++) {
    if (!(i in items)) throw notJson(`${path}[${i}]`, 'a hole (a sparse array)');
    parts.push(write(items[i], seen, `${path}[${i}]`));
  }
  return `[${parts.join(',')}]`;
}

function notJson(path: string, what: string): OncelyError {
  return new OncelyError(
    'TOOL_ARGS_INVALID',
    `arguments at ${path} hold ${what}, which JSON cannot carry; pass plain JSON values`,
    { details: { path } },
  );
}

/** The value as the ledger stores it: exactly what its canonical JSON text says. */
export function toJsonValue(value: unknown): JsonValue {
  return JSON.parse(canonicalJson(value)) as JsonValue;
}

/** The SHA-256 (hex) of the canonical JSON of a call's arguments. */
export function argsDigest(args: unknown): string {
  return createHash('sha256').update(canonicalJson(args)).digest('hex');
}
