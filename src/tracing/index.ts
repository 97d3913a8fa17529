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
  type Link,
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
  /** Spans this one is related to without being their child (the caller's, for a run's span). */
  readonly links?: Link[];
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
  const span = startSpan(name, { ...options, parent });
  try {
    return await otelContext.with(trace.setSpan(parent, span), () => work(span));
  } catch (error) {
    failSpan(span, error);
    throw error;
  } finally {
    span.end();
  }
}

/**
 * Starts a span the caller ends (one that outlives a function call: a model's stream, ended when
 * the stream is read to its end, fails or is cancelled).
 */
export function startSpan(name: string, options: SpanOptions): Span {
  const span = tracer().startSpan(
    name,
    {
      kind: options.kind ?? SpanKind.INTERNAL,
      ...(options.links === undefined ? {} : { links: options.links }),
    },
    options.parent ?? otelContext.active(),
  );
  if (options.attributes !== undefined && span.isRecording()) span.setAttributes(options.attributes());
  return span;
}

/** Records an error on a span and sets its status to ERROR (the caller still ends it). */
export function failSpan(span: Span, error: unknown): void {
  span.recordException(error instanceof Error ? error : String(error));
  span.setStatus({
    code: SpanStatusCode.ERROR,
    message: error instanceof Error ? error.message : String(error),
  });
}

/** The span context of the span active in `context`, when it is a valid one (a caller's span to link to). */
export function activeSpanLinks(context: Context = otelContext.active()): Link[] {
  const active = trace.getSpanContext(context);
  return active !== undefined && trace.isSpanContextValid(active) ? [{ context: active }] : [];
}

/** The trace id of the span active in `context`, if any. */
export function activeTraceId(context: Context = otelContext.active()): string | undefined {
  return trace.getSpanContext(context)?.traceId;
}

/**
 * The stream, ending the span when it is read to its end, fails (the span records the error) or is
 * cancelled: a streamed model call's span lasts as long as its stream.
 */
export function streamInSpan<T>(stream: ReadableStream<T>, span: Span): ReadableStream<T> {
  const reader = stream.getReader();
  let open = true;
  const end = (error?: unknown): void => {
    if (!open) return;
    open = false;
    if (error !== undefined) failSpan(span, error);
    span.end();
  };
  return new ReadableStream<T>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) {
          end();
          controller.close();
        } else controller.enqueue(value);
      } catch (error) {
        end(error);
        controller.error(error);
      }
    },
    async cancel(reason) {
      end();
      await reader.cancel(reason);
    },
  });
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
