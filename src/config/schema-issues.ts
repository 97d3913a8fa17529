import { z } from 'zod/v4';
import type { ConfigProblem } from './config-source.js';

/** Turns zod's issues into problems that say what was expected and what was found. */
export function problemsOf(error: z.ZodError, schema: z.ZodType, value: unknown): ConfigProblem[] {
  return error.issues.flatMap((issue): ConfigProblem[] => {
    const path = issue.path;
    if (issue.code === 'unrecognized_keys') {
      const known = keysAt(schema, path, value);
      const hint = known === undefined ? '' : `; expected one of: ${known.join(', ')}`;
      return issue.keys.map((key) => ({
        path: [...path, key],
        atKey: true,
        message: `unknown key "${key}"${hint}`,
      }));
    }
    return [{ path, message: expectation(issue, valueAt(value, path)) }];
  });
}

function expectation(issue: z.core.$ZodIssue, actual: unknown): string {
  const got = actual === undefined ? 'but it is missing' : `got ${shown(actual)}`;
  switch (issue.code) {
    case 'invalid_value':
      return `expected ${oneOf(issue.values)}, ${got}`;
    case 'invalid_union': {
      const options = (issue as { options?: unknown[] }).options;
      if (issue.discriminator !== undefined && options !== undefined)
        return `expected ${oneOf(options)}, ${got}`;
      return `${issue.message}, ${got}`;
    }
    case 'invalid_type':
      return `expected ${typeWord(issue.expected)}, ${got}`;
    case 'too_small':
      return `expected ${bound(issue.origin, 'at least', issue.minimum, issue.inclusive)}, ${got}`;
    case 'too_big':
      return `expected ${bound(issue.origin, 'at most', issue.maximum, issue.inclusive)}, ${got}`;
    case 'invalid_format':
      return issue.format === 'url'
        ? `expected a URL such as http://localhost:11434/v1, ${got}`
        : `${issue.message}, ${got}`;
    default:
      return issue.message;
  }
}

function bound(origin: string, word: string, limit: number | bigint, inclusive: boolean | undefined): string {
  const n =
    inclusive === false ? (word === 'at least' ? Number(limit) + 1 : Number(limit) - 1) : Number(limit);
  if (origin === 'string')
    return n === 1 && word === 'at least' ? 'a non-empty string' : `a string of ${word} ${n} characters`;
  if (origin === 'array') return `a list of ${word} ${n} items`;
  return `a number ${word} ${n}`;
}

function typeWord(expected: string): string {
  const words: Record<string, string> = {
    string: 'a string',
    number: 'a number',
    int: 'an integer',
    boolean: 'true or false',
    array: 'a list',
    object: 'a mapping',
    record: 'a mapping',
  };
  return words[expected] ?? expected;
}

/** `"pause" or "fail"`, `"a", "b" or "c"`. */
export function oneOf(values: readonly unknown[]): string {
  const shownValues = values.map((v) => JSON.stringify(v));
  if (shownValues.length <= 1) return shownValues.join('');
  return `${shownValues.slice(0, -1).join(', ')} or ${shownValues.at(-1)}`;
}

/** A value as the user wrote it: strings quoted, structures named. */
export function shown(value: unknown): string {
  if (value === null) return 'an empty value';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return typeof value;
}

function valueAt(value: unknown, path: readonly PropertyKey[]): unknown {
  let current = value;
  for (const segment of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<PropertyKey, unknown>)[segment];
  }
  return current;
}

/** The keys the schema allows at a path, to suggest the right spelling of an unknown key. */
function keysAt(schema: z.ZodType, path: readonly PropertyKey[], value: unknown): string[] | undefined {
  let current: z.ZodType | undefined = schema;
  let data = value;
  for (let i = 0; i <= path.length; i += 1) {
    current = unwrap(current, data);
    if (current === undefined) return undefined;
    const segment = path[i];
    if (segment === undefined) return current instanceof z.ZodObject ? Object.keys(current.shape) : undefined;
    if (current instanceof z.ZodObject)
      current = (current.shape as Record<string, z.ZodType>)[String(segment)];
    else if (current instanceof z.ZodArray) current = current.element as z.ZodType;
    else if (current instanceof z.ZodRecord) current = current.valueType as z.ZodType;
    else return undefined;
    data = valueAt(data, [segment]);
  }
  return undefined;
}

function unwrap(schema: z.ZodType | undefined, data: unknown): z.ZodType | undefined {
  let current = schema;
  while (current instanceof z.ZodOptional || current instanceof z.ZodDefault)
    current = current.unwrap() as z.ZodType;
  if (current instanceof z.ZodDiscriminatedUnion) {
    const key = current._zod.def.discriminator;
    const options = current.options as z.ZodType[];
    return options.find((option) => matches(option, key, valueAt(data, [key])));
  }
  return current;
}

function matches(option: z.ZodType, key: string, tag: unknown): boolean {
  if (!(option instanceof z.ZodObject)) return false;
  const literal = (option.shape as Record<string, z.ZodType>)[key];
  return literal instanceof z.ZodLiteral && literal.values.has(tag as never);
}
