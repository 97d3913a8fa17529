import { createHash } from 'node:crypto';
import { OncelyError } from '../errors/index.js';
import type { JsonValue } from './record.js';

/**
 * The canonical JSON text of a value (RFC 8785 style): object keys sorted by UTF-16 code units, no
 * whitespace, numbers and strings as `JSON.stringify` writes them. Values with a `toJSON` (a Date) are
 * taken as JSON would take them. Anything JSON cannot carry faithfully (NaN, Infinity, a BigInt, a
 * function, `undefined` in an array, a cycle) is refused, so two different values never share a text.
 */
export function canonicalJson(value: unknown): string {
  return write(value, new Set(), '$');
}

function write(value: unknown, seen: Set<object>, path: string): string {
  if (value !== null && typeof value === 'object' && 'toJSON' in value) {
    const toJSON = value.toJSON;
    if (typeof toJSON === 'function') value = (toJSON as () => unknown).call(value);
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

function writeContainer(value: object, seen: Set<object>, path: string): string {
  if (seen.has(value)) throw notJson(path, 'a reference cycle');
  seen.add(value);
  try {
    if (Array.isArray(value)) {
      return `[${value.map((item: unknown, i) => write(item, seen, `${path}[${i}]`)).join(',')}]`;
    }
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
