import type { WorkflowEngine } from '../workflows/index.js';
import type {
  FastifyBaseLogger,
  FastifyInstance,
  RawReplyDefaultExpression,
  RawRequestDefaultExpression,
  RawServerDefault,
} from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Runtime } from '../runs/index.js';
import type { Store } from '../store/index.js';
import type { ApiMetrics } from './metrics.js';
import type { RunEventBell } from './run-event-bell.js';

/** The Fastify instance routes are registered on: zod schemas type every request and answer. */
export type ApiApp = FastifyInstance<
  RawServerDefault,
  RawRequestDefaultExpression,
  RawReplyDefaultExpression,
  FastifyBaseLogger,
  ZodTypeProvider
>;

/** What the routes work with. */
export interface ApiContext {
  readonly runtime: Runtime;
  /** The workflows the API starts and reads (none defined: an engine with none). */
  readonly workflows: WorkflowEngine;
  readonly store: Store;
  readonly metrics: ApiMetrics;
  /** `/metrics` needs an admin API key (it reports every tenant's counts). */
  readonly metricsAuth: boolean;
  /** How often an event stream looks for new run events, and sends a keep-alive comment. */
  readonly events: { readonly pollMs: number; readonly heartbeatMs: number };
  /** Hints that a run's events were written by another process: its streams read on at once. */
  readonly bell: RunEventBell;
  /** Open event streams, ended when the server closes. */
  readonly streams: Set<AbortController>;
  /** Open event streams per API key id, for the per-key limit. */
  readonly streamsByKey: Map<string, number>;
  /** At most this many open streams per key, and in all. */
  readonly streamLimits: { readonly perKey: number; readonly total: number };
}

/** OpenAPI: the routes a key opens, and how it is sent. */
export const BEARER = [{ bearer: [] }];
