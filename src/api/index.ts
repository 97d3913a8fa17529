export {
  buildApiServer,
  routesOf,
  DEFAULT_BODY_LIMIT,
  DEFAULT_MAX_STREAMS,
  DEFAULT_MAX_CONNECTIONS,
  DEFAULT_MAX_STREAMS_PER_KEY,
  type ApiServerOptions,
  type ApiRoute,
} from './server.js';
export type { ApiApp } from './context.js';
export { ApiMetrics } from './metrics.js';
export { HTTP_STATUS, errorResponse, type ErrorEnvelope } from './http-errors.js';
export {
  createApiKey,
  hashApiKey,
  roleAllows,
  looksLikeApiKey,
  type CreateApiKeyRequest,
} from './auth/api-keys.js';
export { ApiClient, DEFAULT_API_URL, type ApiFlags } from './client.js';
export type {
  ToolExecution,
  ToolExecutionWithHistory,
  Compensation,
  Run,
  Approval,
  ApiKey,
  Page,
} from './client-types.js';
