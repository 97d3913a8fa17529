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
  parseKey(key);
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
    const base = key.endsWith(COMPENSATION_SUFFIX) ? key.slice(0, -COMPENSATION_SUFFIX.length) : key;
    const parts = base.split(':');
    if (parts.length === 2 && isValidId(parts[0]) && isValidId(parts[1])) {
      return {
        runId: parts[0],
        toolCallId: parts[1],
        compensationOf: base === key ? null : base,
      };
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
