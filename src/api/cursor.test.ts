import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isOncelyError } from '../errors/index.js';
import { cursorTime, decodeCursor, encodeCursor, pageOf } from './cursor.js';

const schema = z.strictObject({ at: cursorTime, key: z.string().regex(/^[a-z0-9_:]+$/) });
const codeOf = (work: () => unknown): string => {
  try {
    work();
    return '(none)';
  } catch (error) {
    return isOncelyError(error) ? error.code : String(error);
  }
};

describe('list cursors', () => {
  it('round-trip the position of the last item', () => {
    const position = { at: '2026-05-04T10:15:00.951Z', key: 'run_1:call_2' };
    expect(decodeCursor(schema, encodeCursor(position))).toEqual(position);
    expect(decodeCursor(schema, undefined)).toBeUndefined();
  });

  it('refuse anything this server did not write, as API_REQUEST_INVALID', () => {
    const forged = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
    for (const cursor of [
      'not base64 json',
      forged({ at: "'; DROP TABLE runs; --", key: 'a' }),
      forged({ at: '2026-02-30T00:00:00.000Z', key: 'a' }),
      forged({ at: '0000-01-01T00:00:00.000Z', key: 'a' }),
      forged({ at: '2026-05-04T10:15:00Z', key: 'a' }),
      forged({ at: '2026-05-04T10:15:00.951Z', key: 'a', extra: 1 }),
      forged([1, 2]),
    ]) {
      expect(
        codeOf(() => decodeCursor(schema, cursor)),
        cursor,
      ).toBe('API_REQUEST_INVALID');
    }
  });

  it('give a full page a next cursor and a short page none', () => {
    const items = [{ id: 'a' }, { id: 'b' }];
    const full = pageOf(
      items,
      2,
      (i) => i.id,
      (i) => ({ id: i.id }),
    );
    expect(full.items).toEqual(['a', 'b']);
    expect(JSON.parse(Buffer.from(full.next_cursor!, 'base64url').toString())).toEqual({ id: 'b' });
    expect(
      pageOf(
        items,
        3,
        (i) => i.id,
        (i) => ({ id: i.id }),
      ).next_cursor,
    ).toBeNull();
  });
});
