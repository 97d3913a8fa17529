import { createHash } from 'node:crypto';
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  context as otelContext,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { packageVersion } from '../util/package-version.js';

/*
 * OpenTelemetry spans through @opentelemetry/api: a no-op until the application registers an SDK
 * (a TracerProvider), so a process that does not trace pays a few function calls per span.
 *
 * Every process that drives a run puts its spans in the same trace: the trace id is derived from the
 * run's tenant and id, under a parent span context no process ever ends. A run driven by three
 * workers over an hour (a kill, a takeover, an approval) is one trace, whichever process is asked.
 */

const TRACER_NAME = 'oncely';

let cached: Tracer | undefined;

/** The tracer: a proxy of the global provider's, so an SDK registered after import is used. */
function tracer(): Tracer {
  cached ??= trace.getTracer(TRACER_NAME, packageVersion());
  return cached;
}

/** The context whose (remote, sampled) parent every span of the run hangs from. */
export function runTraceContext(
  tenantId: string,
  runId: string,
  base: Context = otelContext.active(),
): Context {
  const digest = createHash('sha256').update(`oncely-run\0${tenantId}\0${runId}`).digest('hex');
  return trace.setSpanContext(base, {
    traceId: digest.slice(0, 32),
    spanId: digest.slice(32, 48),
    traceFlags: TraceFlags.SAMPLED,
    isRemote: true,
  });
}

/** The trace id of a run, as tracing backends show it (32 hex digits). */
export function runTraceId(tenantId: string, runId: string): string {
  return trace.getSpanContext(runTraceContext(tenantId, runId))?.traceId ?? '';
}

export interface SpanOptions {
  readonly kind?: SpanKind;
  /** Made only when the span records (an SDK is registered and samples it): spans are on hot paths. */
  readonly attributes?: () => Attributes;
  /** The parent context; the active one when not given. */
  readonly parent?: Context;
}

/**
 * Runs `work` in a span: the span is the active one inside it (where a context manager is
 * registered), is passed to it for attributes known later, ends when it settles, and records an
 * error it throws. `work` may set the status itself (a run that failed without throwing).
 */
export async function inSpan<T>(
  name: string,
  options: SpanOptions,
  work: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = options.parent ?? otelContext.active();
  const span = tracer().startSpan(name, { kind: options.kind ?? SpanKind.INTERNAL }, parent);
  if (options.attributes !== undefined && span.isRecording()) span.setAttributes(options.attributes());
  try {
    return await otelContext.with(trace.setSpan(parent, span), () => work(span));
  } catch (error) {
    span.recordException(error instanceof Error ? error : String(error));
    span.setStatus({
      code: SpanStatusCode.ERROR,
      message: error instanceof Error ? error.message : String(error),
    });
    throw error;
  } finally {
    span.end();
  }
}

/** The context of a span, for spans started below it without a context manager. */
export function contextOf(span: Span, parent: Context = otelContext.active()): Context {
  return trace.setSpan(parent, span);
}

/** Attribute values as OpenTelemetry takes them: no undefined, no null. */
export function definedAttributes(
  attributes: Record<string, string | number | boolean | null | undefined>,
): Attributes {
  const out: Attributes = {};
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== undefined && value !== null) out[name] = value;
  }
  return out;
}

export { ROOT_CONTEXT, SpanKind, SpanStatusCode, type Attributes, type Context, type Span };
