import { z } from 'zod/v4';

const MAX_DEPTH = 64;

/**
 * What is wrong with a parsed JSON body value, if anything: `undefined` (the field is missing), a
 * number JSON cannot carry (`1e999` parses as Infinity), or nesting deeper than 64. Iterative, so a
 * hostile body cannot overflow the stack.
 */
export function jsonProblem(value: unknown): string | undefined {
  if (value === undefined) return 'is required';
  const stack: { value: unknown; depth: number }[] = [{ value, depth: 1 }];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const v = item.value;
    if (typeof v === 'number' && !Number.isFinite(v)) return 'holds a number JSON cannot carry';
    if (typeof v !== 'object' || v === null) continue;
    if (item.depth > MAX_DEPTH) return `is nested deeper than ${MAX_DEPTH} levels`;
    for (const child of Object.values(v)) stack.push({ value: child, depth: item.depth + 1 });
  }
  return undefined;
}

/** Any JSON value a client sends (a run's input, a resolved call's result), checked by `jsonProblem`. */
export function jsonValueSchema(description: string) {
  return z
    .unknown()
    .superRefine((value, ctx) => {
      const problem = jsonProblem(value);
      if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
    })
    .describe(description);
}
