import type { LanguageModelV3 } from '@ai-sdk/provider';

/**
 * Why a value cannot be used as oncely's language model, or undefined when it can: oncely drives AI
 * SDK 6 models (specification v3). A model string ('openai/gpt-4.1', the AI SDK gateway's form), a
 * model of another AI SDK generation, or anything else gets a sentence saying what to install.
 */
export function modelProblem(model: unknown): string | undefined {
  if (typeof model === 'string') {
    return (
      `"${model}" is a model id; give a model object made by a provider package, ` +
      'e.g. openai("gpt-4.1") from @ai-sdk/openai@3 (AI SDK 6)'
    );
  }
  if (
    typeof model !== 'object' ||
    model === null ||
    typeof (model as LanguageModelV3).doGenerate !== 'function'
  ) {
    return 'must be an AI SDK language model (e.g. openai("gpt-4o-mini")) or scriptedModel([...])';
  }
  const version = (model as { specificationVersion?: unknown }).specificationVersion;
  if (version === 'v3') return undefined;
  const generation: Record<string, string> = { v1: 'AI SDK 4', v2: 'AI SDK 5', v4: 'AI SDK 7' };
  return (
    `is a language model of specification ${String(version)} (${generation[String(version)] ?? 'an unknown AI SDK'}); ` +
    'oncely drives AI SDK 6 models (specification v3): install ai@6 and the provider of that generation ' +
    '(@ai-sdk/openai@3, @ai-sdk/anthropic@3, @ai-sdk/openai-compatible@2)'
  );
}
