import { z } from 'zod/v4';
import { OncelyError, isOncelyError } from '../../errors/index.js';
import { assertSchemaCurrent, type SchemaState, type Store } from '../../store/index.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { authErrors, errorEnvelopeSchema } from '../schemas/common.js';
import { ApiMetrics } from '../metrics.js';

const tags = ['operations'];

/** Public routes: liveness, readiness, metrics and the OpenAPI document. */
export function healthRoutes(app: ApiApp, ctx: ApiContext): void {
  healthzRoute(app);
  readyzRoute(app, ctx);
  metricsRoute(app, ctx);
  openApiRoute(app);
}

function healthzRoute(app: ApiApp): void {
  app.get(
    '/healthz',
    {
      schema: {
        summary: 'Liveness: the process answers',
        tags,
        response: { 200: z.object({ status: z.literal('ok') }) },
      },
    },
    () => ({ status: 'ok' as const }),
  );
}

function readyzRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/readyz',
    {
      schema: {
        summary: 'Readiness: the database answers and its schema is the one this server knows',
        tags,
        response: {
          200: z.object({ status: z.literal('ready'), schema_version: z.number().int() }),
          503: errorEnvelopeSchema,
        },
      },
    },
    async () => {
      const state = await withinReadiness(async () => {
        const known = await schemaState(ctx.store);
        assertSchemaCurrent(known);
        await ctx.store.probe();
        return known;
      });
      return { status: 'ready' as const, schema_version: state.version };
    },
  );
}

function metricsRoute(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/metrics',
    {
      // With --metrics-auth, an admin key: the counts are every tenant's.
      config: ctx.metricsAuth ? { role: 'admin' } : {},
      schema: {
        summary:
          'Prometheus metrics: calls by tool and status, unknown calls per tenant, runs, ledger latency',
        tags,
        ...(ctx.metricsAuth ? { security: BEARER } : {}),
        response: {
          200: {
            description:
              'The Prometheus text format, or OpenMetrics 1.0 when Accept asks for application/openmetrics-text',
            content: {
              'text/plain': { schema: z.string() },
              'application/openmetrics-text': { schema: z.string() },
            },
          },
          ...(ctx.metricsAuth ? authErrors : {}),
          503: errorEnvelopeSchema,
        },
      },
    },
    async (request, reply) => {
      const format = ApiMetrics.negotiate(request.headers.accept);
      const text = await ctx.metrics.render(ctx.store, ctx.runtime.ledger.landingMarginMs, format);
      return reply.header('content-type', ctx.metrics.contentTypeFor(format)).send(text);
    },
  );
}

function openApiRoute(app: ApiApp): void {
  app.get(
    '/openapi.json',
    {
      schema: {
        summary: 'This document: OpenAPI 3.1, generated from the schemas the server validates with',
        tags,
        response: { 200: z.record(z.string(), z.unknown()) },
      },
    },
    () => app.swagger() as unknown as Record<string, unknown>,
  );
}

/** How long `/readyz` waits for the store: one slower than this cannot serve requests in time. */
export const READY_TIMEOUT_MS = 2_000;

async function withinReadiness<T>(check: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(
        new OncelyError(
          'STORE_UNAVAILABLE',
          `the database did not answer within ${READY_TIMEOUT_MS / 1000} s (a lock held by another ` +
            'process, an overloaded server, a slow disk)',
        ),
      );
    }, READY_TIMEOUT_MS);
  });
  const work = check();
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
    // A check that lost the race still settles later; its rejection has no one to hear it.
    work.catch(() => undefined);
  }
}

async function schemaState(store: Store): Promise<SchemaState> {
  try {
    return await store.schemaState();
  } catch (cause) {
    if (isOncelyError(cause)) throw cause;
    throw new OncelyError('STORE_UNAVAILABLE', 'the database does not answer; check it is up and reachable', {
      cause,
    });
  }
}
