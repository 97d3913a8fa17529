import { z } from 'zod/v4';
import { OncelyError } from '../errors/index.js';

/** A time as the stores write it (`toISOString()`), and recent enough for any database to compare. */
export const cursorTime = z.string().refine((s) => {
  const t = Date.parse(s);
  return Number.isFinite(t) && t >= 0 && new Date(t).toISOString() === s;
}, 'not a time this server wrote');

/**
 * Cursors are opaque to clients: base64url JSON of the last item's sort position. A cursor that does
 * not decode to what this list expects is a 400, never a query.
 */
export function encodeCursor(position: Record<string, unknown>): string {
  return Buffer.from(JSON.stringify(position), 'utf8').toString('base64url');
}

export function decodeCursor<T extends z.ZodType>(
  schema: T,
  cursor: string | undefined,
): z.output<T> | undefined {
  if (cursor === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    value = undefined;
  }
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  throw new OncelyError(
    'API_REQUEST_INVALID',
    'the cursor is not valid for this list; pass the next_cursor of the previous page unchanged',
  );
}

/** The page and its next cursor: a full page has one, a short page is the last. */
export function pageOf<R, T>(
  records: readonly R[],
  limit: number,
  present: (record: R) => T,
  position: (record: R) => Record<string, unknown>,
): { items: T[]; next_cursor: string | null } {
  const last = records.at(-1);
  return {
    items: records.map(present),
    next_cursor: records.length >= limit && last !== undefined ? encodeCursor(position(last)) : null,
  };
}
