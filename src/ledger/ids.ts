import { OncelyError } from '../errors/index.js';

/** Run ids, tool call ids and tenant ids: 1–128 of `A-Z a-z 0-9 _ . -`, so a key splits unambiguously. */
const ID_PATTERN = /^[A-Za-z0-9_.-]{1,128}$/;
const COMPENSATION_SUFFIX = ':compensation';

export function isValidId(value: unknown): value is string {
  return typeof value === 'string' && ID_PATTERN.test(value);
}

export function assertTenantId(tenantId: unknown): asserts tenantId is string {
  if (isValidId(tenantId)) return;
  throw new OncelyError(
    'LEDGER_TENANT_INVALID',
    `tenant id ${describe(tenantId)} is not valid; use 1-128 characters of A-Z a-z 0-9 _ . -`,
  );
}

export function assertCallIds(runId: unknown, toolCallId: unknown): asserts runId is string {
  for (const [name, value] of [
    ['run id', runId],
    ['tool call id', toolCallId],
  ] as const) {
    if (!isValidId(value)) {
      throw new OncelyError(
        'LEDGER_KEY_INVALID',
        `${name} ${describe(value)} is not valid; use 1-128 characters of A-Z a-z 0-9 _ . - (no ":")`,
      );
    }
  }
}

/** `<run_id>:<tool_call_id>`, the idempotency key of one tool call (DESIGN §2). */
export function idempotencyKey(runId: string, toolCallId: string): string {
  assertCallIds(runId, toolCallId);
  return `${runId}:${toolCallId}`;
}

/** The key of the compensation record of a call: `<key>:compensation`. */
export function compensationKey(key: string): string {
  if (parseKey(key).compensationOf !== null) {
    throw new OncelyError(
      'LEDGER_KEY_INVALID',
      `${describe(key)} is a compensation key; a compensation is not compensated again`,
    );
  }
  return `${key}${COMPENSATION_SUFFIX}`;
}

export interface ParsedKey {
  readonly runId: string;
  readonly toolCallId: string;
  /** Set for `<key>:compensation`: the key of the call it compensates. */
  readonly compensationOf: string | null;
}

/** Splits a key, refusing anything that is not `<run>:<call>` or `<run>:<call>:compensation`. */
export function parseKey(key: unknown): ParsedKey {
  if (typeof key === 'string') {
    // Ids hold no ":", so the count of parts tells a call key from a compensation key: a tool call
    // id may itself be "compensation".
    const [runId, toolCallId, suffix, ...rest] = key.split(':');
    const compensation = suffix === COMPENSATION_SUFFIX.slice(1) && rest.length === 0;
    if (isValidId(runId) && isValidId(toolCallId) && (suffix === undefined || compensation)) {
      return { runId, toolCallId, compensationOf: compensation ? `${runId}:${toolCallId}` : null };
    }
  }
  throw new OncelyError(
    'LEDGER_KEY_INVALID',
    `idempotency key ${describe(key)} is not valid; expected "<run_id>:<tool_call_id>" ` +
      `(or "<run_id>:<tool_call_id>:compensation"), each id 1-128 characters of A-Z a-z 0-9 _ . -`,
  );
}

function describe(value: unknown): string {
  if (typeof value !== 'string') return `(${value === null ? 'null' : typeof value})`;
  const shown = value.length > 60 ? `${value.slice(0, 60)}…` : value;
  return JSON.stringify(shown);
}
