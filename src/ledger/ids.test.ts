import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isOncelyError } from '../errors/index.js';
import {
  assertCallIds,
  assertTenantId,
  compensationKey,
  idempotencyKey,
  isValidId,
  parseKey,
} from './ids.js';

function codeOf(work: () => unknown): string {
  try {
    work();
  } catch (error) {
    return isOncelyError(error) ? error.code : `not an OncelyError: ${String(error)}`;
  }
  return '(no error)';
}

const BAD_IDS: unknown[] = ['', 'a:b', 'a b', 'é', 'x'.repeat(129), 'a/b', null, undefined, 12, {}];
const idChar = fc.constantFrom(...'ABCXYZabcxyz0189_.-'.split(''));
const validId = fc.string({ unit: idChar, minLength: 1, maxLength: 128 });

describe('ids', () => {
  it('accepts 1-128 characters of A-Z a-z 0-9 _ . -', () => {
    for (const id of ['a', 'run_1', 'call-2.b', 'X'.repeat(128), 'compensation'])
      expect(isValidId(id)).toBe(true);
    for (const id of BAD_IDS) expect(isValidId(id)).toBe(false);
  });

  it('refuses a bad tenant id with LEDGER_TENANT_INVALID', () => {
    expect(codeOf(() => assertTenantId('acme'))).toBe('(no error)');
    for (const id of BAD_IDS) expect(codeOf(() => assertTenantId(id))).toBe('LEDGER_TENANT_INVALID');
  });

  it('refuses a bad run or tool call id with LEDGER_KEY_INVALID', () => {
    expect(codeOf(() => assertCallIds('run_1', 'call_1'))).toBe('(no error)');
    for (const id of BAD_IDS) {
      expect(codeOf(() => assertCallIds(id, 'call_1'))).toBe('LEDGER_KEY_INVALID');
      expect(codeOf(() => assertCallIds('run_1', id))).toBe('LEDGER_KEY_INVALID');
      expect(codeOf(() => idempotencyKey(id as string, 'call_1'))).toBe('LEDGER_KEY_INVALID');
    }
  });

  it('makes the key <run_id>:<tool_call_id>', () => {
    expect(idempotencyKey('run_1', 'call_2')).toBe('run_1:call_2');
  });

  it('makes compensation keys <key>:compensation, and only of a call key', () => {
    expect(compensationKey('run_1:call_2')).toBe('run_1:call_2:compensation');
    expect(parseKey('run_1:call_2:compensation')).toEqual({
      runId: 'run_1',
      toolCallId: 'call_2',
      compensationOf: 'run_1:call_2',
    });
    for (const bad of ['run_1', 'run_1:call_2:compensation', 'a:b:c', '']) {
      expect(codeOf(() => compensationKey(bad))).toBe('LEDGER_KEY_INVALID');
    }
  });

  it('parses a key, refusing anything else', () => {
    expect(parseKey('run_1:call_2')).toEqual({ runId: 'run_1', toolCallId: 'call_2', compensationOf: null });
    for (const bad of [
      '',
      'run_1',
      'run_1:',
      ':call_2',
      'a:b:c',
      'a:b:compensation:compensation',
      'a b:c',
      null,
      7,
    ]) {
      expect(codeOf(() => parseKey(bad))).toBe('LEDGER_KEY_INVALID');
    }
  });

  it('takes a tool call id named "compensation" as an ordinary call', () => {
    expect(parseKey(idempotencyKey('run_1', 'compensation'))).toEqual({
      runId: 'run_1',
      toolCallId: 'compensation',
      compensationOf: null,
    });
    expect(parseKey('run_1:compensation:compensation')).toEqual({
      runId: 'run_1',
      toolCallId: 'compensation',
      compensationOf: 'run_1:compensation',
    });
  });

  it('round-trips every valid pair of ids through the key and its compensation key', () => {
    fc.assert(
      fc.property(validId, validId, (runId, toolCallId) => {
        const key = idempotencyKey(runId, toolCallId);
        expect(parseKey(key)).toEqual({ runId, toolCallId, compensationOf: null });
        expect(parseKey(compensationKey(key))).toEqual({ runId, toolCallId, compensationOf: key });
      }),
      { numRuns: 500 },
    );
  });
});
