import { WorkflowEngine } from '../workflows/index.js';
import { workflowRoutes } from './routes/workflows.js';
import fastifySwagger from '@fastify/swagger';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import {
  jsonSchemaTransform,
  jsonSchemaTransformObject,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import type { Runtime } from '../runs/index.js';
import { authenticator } from './auth/authenticate.js';
import { ANSWER_HEADERS, answerClientError, limitConnections } from './client-errors.js';
import type { ApiApp, ApiContext } from './context.js';
import { routeNotFound, sendError } from './http-errors.js';
import { requestLogFields } from './log-redaction.js';
import { ApiMetrics } from './metrics.js';
import { RunEventBell } from './run-event-bell.js';
import { apiKeyRoutes } from './routes/api-keys.js';
import { approvalRoutes } from './routes/approvals.js';
import { healthRoutes } from './routes/health.js';
import { runEventRoutes } from './routes/run-events.js';
import { runRoutes } from './routes/runs.js';
import { toolExecutionRoutes } from './routes/tool-executions.js';
import { workerRoutes } from './routes/workers.js';
import { consoleRoutes } from './routes/console.js';
import { inboxEventRoutes } from './routes/inbox-events.js';
import { loopRunRoutes } from './routes/loop-runs.js';
import { incidentRoutes } from './routes/incidents.js';

export const DEFAULT_BODY_LIMIT = 256 * 1024;

export interface ApiRoute {
  readonly method: string;
  readonly url: string;
}

const ROUTES = new WeakMap<object, ApiRoute[]>();

/** Every route a server built by `buildApiServer` answers (method and URL pattern), in registration order. */
export function routesOf(app: ApiApp): readonly ApiRoute[] {
  return ROUTES.get(app) ?? [];
}

export interface ApiServerOptions {
  /** Every decision goes through it; requests read and write its store. */
  readonly runtime: Runtime;
  /** The workflows it starts and reads; default none (workflow runs in the store are still read). */
  readonly workflows?: WorkflowEngine;
  /** More routes to serve beside the API (e.g. the Heist game's page), registered before it is ready. */
  readonly routes?: readonly ((app: ApiApp) => void)[];
  /** Request and decision logs; default none. */
  readonly logger?: Logger;
  /** The largest request body accepted, in bytes; default 256 KiB. Larger answers 413. */
  readonly bodyLimit?: number;
  /** Default: a fresh registry. Pass the one whose `instrument()` wrapped the runtime's store. */
  readonly metrics?: ApiMetrics;
  /** `/metrics` needs an admin API key (default false: open, for a scraper on a private network). */
  readonly metricsAuth?: boolean;
  /** How often a run's event stream looks for new events; default 500 ms. */
  readonly eventPollMs?: number;
  /** How often an idle event stream sends a keep-alive comment; default 15 s. */
  readonly heartbeatMs?: number;
  /** Open event streams one API key may hold at once; default 16. More answer 429. */
  readonly maxStreamsPerKey?: number;
  /** Open event streams this server holds at once, over every key; default 1000. More answer 429. */
  readonly maxStreams?: number;
  /** Open connections this server holds at once; default 2048. One more is answered 429 and closed. */
  readonly maxConnections?: number;
}

export const DEFAULT_MAX_STREAMS_PER_KEY = 16;
export const DEFAULT_MAX_STREAMS = 1_000;
export const DEFAULT_MAX_CONNECTIONS = 2_048;

/**
 * The operator HTTP API on a runtime: tool executions, runs, approvals, API keys, health, metrics and
 * its OpenAPI document. Call `listen()` on the answer; `close()` ends open event streams too.
 *
 * @example
 * const app = await buildApiServer({ runtime });
 * await app.listen({ host: '127.0.0.1', port: 8080 });
 */
export async function buildApiServer(options: ApiServerOptions): Promise<ApiApp> {
  const app = createApp(options);
  const ctx: ApiContext = {
    runtime: options.runtime,
    workflows: options.workflows ?? new WorkflowEngine(options.runtime, []),
    store: options.runtime.store,
    metrics: options.metrics ?? new ApiMetrics(),
    metricsAuth: options.metricsAuth ?? false,
    events: { pollMs: options.eventPollMs ?? 500, heartbeatMs: options.heartbeatMs ?? 15_000 },
    bell: new RunEventBell(options.runtime.store.wakeups, options.runtime.deltas),
    streams: new Set(),
    streamsByKey: new Map(),
    streamLimits: {
      perKey: options.maxStreamsPerKey ?? DEFAULT_MAX_STREAMS_PER_KEY,
      total: options.maxStreams ?? DEFAULT_MAX_STREAMS,
    },
  };
  installHooks(app, ctx);
  await app.register(fastifySwagger, openApiOptions());
  const domains = [
    incidentRoutes,
    toolExecutionRoutes,
    runRoutes,
    runEventRoutes,
    loopRunRoutes,
    inboxEventRoutes,
    approvalRoutes,
    apiKeyRoutes,
    workerRoutes,
    workflowRoutes,
    healthRoutes,
    consoleRoutes,
  ];
  for (const register of domains) register(app, ctx);
  for (const register of options.routes ?? []) register(app);
  await app.ready();
  return app;
}

function createApp(options: ApiServerOptions): ApiApp {
  // The request log's `req` is fastify's, with secrets in the URL redacted (a child's serializer wins).
  const logger: FastifyBaseLogger | undefined = options.logger?.child(
    {},
    { serializers: { req: requestLogFields } },
  );
  const app = Fastify({
    ...(logger === undefined ? { logger: false } : { loggerInstance: logger }),
    // What Node's parser refuses (headers too large, not HTTP) answers in the envelope too.
    clientErrorHandler: (error, socket) => {
      answerClientError(logger, error, socket);
    },
    bodyLimit: options.bodyLimit ?? DEFAULT_BODY_LIMIT,
    exposeHeadRoutes: false,
    return503OnClosing: true,
    routerOptions: { maxParamLength: 1024 },
    frameworkErrors: (error, request, reply) => {
      sendError(error, request, reply);
    },
  }).withTypeProvider<ZodTypeProvider>();
  // Only JSON bodies: a text/plain body answers 415, as any other type does, not a 400 about JSON.
  app.removeContentTypeParser('text/plain');
  limitConnections(app.server, options.maxConnections ?? DEFAULT_MAX_CONNECTIONS, logger);
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.decorateRequest('principal', null);
  app.setErrorHandler((error, request, reply) => sendError(error, request, reply));
  app.setNotFoundHandler((request, reply) => sendError(routeNotFound(request), request, reply));
  return app;
}

/** Route bookkeeping, authentication, and ending event streams when the server closes. */
function installHooks(app: ApiApp, ctx: ApiContext): void {
  const routes: ApiRoute[] = [];
  ROUTES.set(app, routes);
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) routes.push({ method, url: route.url });
  });
  app.addHook('onRequest', authenticator(ctx.store.apiKeys));
  // Answers are data, never something to sniff, render or cache (an event stream says no-cache itself).
  app.addHook('onSend', async (_request, reply, payload) => {
    for (const [name, value] of Object.entries(ANSWER_HEADERS)) {
      if (!reply.hasHeader(name)) reply.header(name, value);
    }
    return payload;
  });
  // Counted by route pattern (bounded), never by raw URL; a request no route matched is `unmatched`.
  app.addHook('onResponse', async (request, reply) => {
    ctx.metrics.httpAnswered(
      request.method,
      request.routeOptions.url ?? 'unmatched',
      reply.statusCode,
      reply.elapsedTime / 1000,
    );
  });
  // Open event streams would otherwise hold the server open until their clients leave.
  app.addHook('preClose', (done) => {
    for (const stream of ctx.streams) stream.abort();
    done();
  });
  app.addHook('onClose', async () => {
    await ctx.bell.close();
  });
}

function openApiOptions() {
  return {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'oncely operator API',
        version: '1',
        description:
          'Find the tool calls nobody knows the outcome of, and decide them; start, follow and cancel runs; ' +
          'approve calls. Every /v1 route needs "Authorization: Bearer <key>"; records of another tenant answer 404.',
      },
      components: { securitySchemes: { bearer: { type: 'http' as const, scheme: 'bearer' } } },
    },
    transform: jsonSchemaTransform,
    transformObject: jsonSchemaTransformObject,
  };
}
