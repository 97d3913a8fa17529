import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors, isResponseSerializationError } from 'fastify-type-provider-zod';
import { OncelyError, isOncelyError, type ErrorCode } from '../errors/index.js';
import type { ToolExecutionRecord } from '../ledger/index.js';
import type { ApprovalRecord } from '../run-state/index.js';
import { toApprovalFields, toToolExecution } from './present.js';

/**
 * The one table from error code to HTTP status. Every code has a row (the type checks it), so a new
 * code cannot reach a client without a decision about its status.
 */
export const HTTP_STATUS = {
  TOOL_DEFINITION_INVALID: 500,
  TOOL_ARGS_INVALID: 400,
  TOOL_NOT_ATTEMPTED: 500,
  TOOL_EXECUTION_FAILED: 500,
  TOOL_TIMEOUT: 504,
  TOOL_CONTRACT_VIOLATED: 500,
  TOOL_RESULT_INVALID: 500,
  LEDGER_KEY_INVALID: 400,
  LEDGER_TENANT_INVALID: 400,
  LEDGER_ARGS_MISMATCH: 409,
  LEDGER_TRANSITION_REFUSED: 409,
  LEDGER_ALREADY_SETTLED: 409,
  LEDGER_RECORD_NOT_FOUND: 404,
  LEDGER_REASON_REQUIRED: 400,
  LEDGER_ACTOR_INVALID: 400,
  LEDGER_NOT_COMPENSABLE: 409,
  LEDGER_NOT_RECONCILABLE: 409,
  LEDGER_BATCH_INVALID: 400,
  AGENT_DEFINITION_INVALID: 500,
  AGENT_NOT_FOUND: 422,
  RUN_NOT_FOUND: 404,
  RUN_CONFLICT: 409,
  RUN_INPUT_INVALID: 400,
  RUN_ALREADY_FINAL: 409,
  RUN_LEASE_LOST: 409,
  RUN_MAX_STEPS: 409,
  RUN_NOT_AWAITING_MESSAGE: 409,
  RUN_MESSAGE_CONFLICT: 409,
  RUN_BUDGET_EXCEEDED: 409,
  WORKFLOW_DEFINITION_INVALID: 500,
  WORKFLOW_NOT_FOUND: 404,
  WORKFLOW_INPUT_INVALID: 400,
  WORKFLOW_CONFLICT: 409,
  WORKFLOW_ALREADY_FINAL: 409,
  HEIST_GAME_NOT_FOUND: 404,
  HEIST_MOVE_INVALID: 409,
  HEIST_BUSY: 429,
  WORKFLOW_NOT_PAUSED: 409,
  RUN_CALL_UNKNOWN: 409,
  APPROVAL_NOT_FOUND: 404,
  APPROVAL_ALREADY_DECIDED: 409,
  CONFIG_INVALID: 500,
  MODEL_CONFIG_INVALID: 500,
  MODEL_CALL_FAILED: 502,
  MODEL_OUTPUT_INVALID: 502,
  PACKAGE_MISSING: 500,
  STORE_URL_INVALID: 500,
  STORE_UNAVAILABLE: 503,
  STORE_NOT_FOUND: 503,
  STORE_FILE_REPLACED: 503,
  SCHEMA_OUTDATED: 503,
  SCHEMA_TOO_NEW: 503,
  SCHEMA_MIGRATION_FAILED: 500,
  API_AUTH_REQUIRED: 401,
  API_KEY_INVALID: 401,
  API_FORBIDDEN: 403,
  API_REQUEST_INVALID: 400,
  API_REQUEST_TOO_LARGE: 413,
  API_HEADERS_TOO_LARGE: 431,
  API_REQUEST_TIMEOUT: 408,
  API_MEDIA_TYPE_UNSUPPORTED: 415,
  API_ROUTE_NOT_FOUND: 404,
  API_KEY_NOT_FOUND: 404,
  API_INTERNAL: 500,
  API_TOO_MANY_STREAMS: 429,
  API_TOO_MANY_CONNECTIONS: 429,
  API_KEY_MISSING: 401,
  API_UNREACHABLE: 503,
  API_RESPONSE_INVALID: 502,
  LOOP_DIVERGED: 409,
  LOOP_CALL_NOT_MINTED: 500,
  APPROVAL_REQUIRED: 409,
  APPROVAL_REJECTED: 409,
  TOOL_CALL_REPEAT: 409,
  CALL_IN_FLIGHT: 409,
  RUN_RETRIES_EXCEEDED: 500,
  RUN_NOT_RETRYABLE: 409,
} as const satisfies Record<ErrorCode, number>;

/**
 * `Retry-After` (seconds) for the answers that mean "not now": the store being down, slow or locked
 * (retry soon), a schema or file the operator must mend (retry later), too many open streams.
 */
export const RETRY_AFTER_S: Partial<Record<ErrorCode, number>> = {
  STORE_UNAVAILABLE: 5,
  STORE_NOT_FOUND: 60,
  STORE_FILE_REPLACED: 60,
  SCHEMA_OUTDATED: 30,
  SCHEMA_TOO_NEW: 30,
  API_TOO_MANY_STREAMS: 5,
  API_TOO_MANY_CONNECTIONS: 5,
  HEIST_BUSY: 5,
};

/** The body of every error answer: `{ "error": { "code", "message" } }`, plus the record a 409 is about. */
export interface ErrorEnvelope {
  error: { code: string; message: string };
  record?: ReturnType<typeof toToolExecution>;
  approval?: ReturnType<typeof toApprovalFields>;
}

/** The status and body an error answers with. Unknown errors are 500 `API_INTERNAL`, never their text. */
export function errorResponse(error: unknown): { status: number; body: ErrorEnvelope } {
  const oncely = asOncelyError(error);
  const body: ErrorEnvelope = { error: { code: oncely.code, message: oncely.message } };
  // The runtime puts the record a conflict is about in `details` (see resolve and decideApproval).
  const details = oncely.details ?? {};
  if (
    (oncely.code === 'LEDGER_ALREADY_SETTLED' || oncely.code === 'CALL_IN_FLIGHT') &&
    isRecord(details.record)
  ) {
    body.record = toToolExecution(details.record as unknown as ToolExecutionRecord);
  }
  if (oncely.code === 'APPROVAL_ALREADY_DECIDED' && isRecord(details.approval)) {
    body.approval = toApprovalFields(details.approval as unknown as ApprovalRecord);
  }
  return { status: HTTP_STATUS[oncely.code], body };
}

/** Framework errors (bad JSON, a body too large, a schema failure) as oncely errors with stable codes. */
function asOncelyError(error: unknown): OncelyError {
  if (isOncelyError(error)) return error;
  if (hasZodFastifySchemaValidationErrors(error)) {
    const issues = error.validation.map((v) => {
      const where = `${error.validationContext ?? 'request'}${v.instancePath.replaceAll('/', '.')}`;
      return `${where}: ${v.message ?? 'is not valid'}`;
    });
    return new OncelyError('API_REQUEST_INVALID', `the request is not valid: ${issues.join('; ')}`);
  }
  if (isResponseSerializationError(error)) {
    return new OncelyError('API_INTERNAL', 'the server built an answer it could not send; this is a bug', {
      cause: error,
    });
  }
  const status = (error as Partial<FastifyError> | null)?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) return frameworkError(error, status);
  return new OncelyError('API_INTERNAL', 'the server failed to answer; the error is in its log', {
    cause: error,
  });
}

function frameworkError(error: unknown, status: number): OncelyError {
  const message = error instanceof Error ? error.message : String(error);
  if (status === 413) {
    return new OncelyError('API_REQUEST_TOO_LARGE', `the request body is too large: ${message}`);
  }
  if (status === 415) {
    return new OncelyError(
      'API_MEDIA_TYPE_UNSUPPORTED',
      'send the body as JSON with the header "Content-Type: application/json"',
    );
  }
  return new OncelyError('API_REQUEST_INVALID', `the request is not valid: ${message}`);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** Answers any error with the envelope; 5xx are logged with their cause, 4xx at debug. */
export function sendError(error: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const { status, body } = errorResponse(error);
  if (status >= 500) request.log.error({ err: error, code: body.error.code }, 'request failed');
  else request.log.info({ code: body.error.code }, 'request refused');
  const retryAfter = RETRY_AFTER_S[body.error.code as ErrorCode];
  if (retryAfter !== undefined) void reply.header('retry-after', String(retryAfter));
  return reply.code(status).type('application/json; charset=utf-8').send(body);
}

export function routeNotFound(request: FastifyRequest): OncelyError {
  const path = (request.url.split('?')[0] ?? '').slice(0, 200);
  return new OncelyError(
    'API_ROUTE_NOT_FOUND',
    `there is no ${request.method} ${path}; GET /openapi.json lists every route`,
  );
}
