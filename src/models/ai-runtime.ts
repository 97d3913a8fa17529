import type * as Ai from 'ai';
import type * as AiInternal from 'ai/internal';

/** The AI SDK's functions oncely calls a model with. */
export interface AiRuntime {
  readonly ai: typeof Ai;
  readonly internal: typeof AiInternal;
}

let loading: Promise<AiRuntime> | undefined;

/**
 * The AI SDK, loaded with the first model call rather than with the package: it is the larger part
 * of what importing oncely would cost, and a process that only guards calls never needs it.
 */
export function aiRuntime(): Promise<AiRuntime> {
  loading ??= Promise.all([import('ai'), import('ai/internal')]).then(([ai, internal]) => ({ ai, internal }));
  return loading;
}
