import type { ErrorCode } from './codes.js';

/** The base of every error oncely throws: a stable `code`, a message that says what to do, a `cause`. */
export class OncelyError extends Error {
  readonly code: ErrorCode;
  readonly details: Readonly<Record<string, unknown>> | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options: { cause?: unknown; details?: Record<string, unknown> } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'OncelyError';
    this.code = code;
    this.details = options.details;
  }

  /** The plain, JSON-safe form stored in the ledger and sent over HTTP. */
  toJSON(): { code: ErrorCode; message: string } {
    return { code: this.code, message: this.message };
  }
}

/**
 * Thrown by a tool that refused a call before anything left the process (an expired token, a locked
 * account), or that the downstream system refused outright. The call is recorded `failed`: nothing
 * took effect, there is nothing to reconcile, and it may run again later with the same key.
 *
 * @example
 * if (!token.valid) throw new ToolNotAttemptedError('the billing token expired; refresh it and retry');
 */
export class ToolNotAttemptedError extends OncelyError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super('TOOL_NOT_ATTEMPTED', message, options);
    this.name = 'ToolNotAttemptedError';
  }
}

/** Raised by `assertToolContract` with every problem found, each saying what to change. */
export class ToolContractError extends OncelyError {
  readonly problems: readonly string[];

  constructor(toolName: string, problems: readonly string[]) {
    super(
      'TOOL_CONTRACT_VIOLATED',
      `tool "${toolName}" breaks the side-effect contract:\n${problems.map((p) => `  - ${p}`).join('\n')}`,
      { details: { tool: toolName, problems: [...problems] } },
    );
    this.name = 'ToolContractError';
    this.problems = problems;
  }
}

export function isOncelyError(error: unknown, code?: ErrorCode): error is OncelyError {
  return error instanceof OncelyError && (code === undefined || error.code === code);
}

/**
 * A JSON-safe summary of any thrown value, for the ledger. It never throws itself: a thrown value
 * whose `name` or `message` getter throws, or that cannot be turned into a string, is still
 * summarised, so the outcome it stands for is recorded rather than lost.
 */
export function errorInfo(error: unknown): { code: string; message: string } {
  if (error instanceof OncelyError) return { code: error.code, message: safeText(() => error.message) };
  if (error instanceof Error) {
    const name = safeText(() => error.name);
    return {
      code: typeof name === 'string' && name !== '' ? name : 'Error',
      message: safeText(() => error.message),
    };
  }
  return { code: 'Error', message: safeText(() => String(error)) };
}

function safeText(read: () => unknown): string {
  try {
    const value = read();
    return typeof value === 'string' ? value : String(value);
  } catch (problem) {
    let why = 'it threw';
    try {
      why = problem instanceof Error && typeof problem.message === 'string' ? problem.message : why;
    } catch {
      // a second throwing getter: keep the plain words
    }
    return `(the error's text could not be read: ${why})`;
  }
}
