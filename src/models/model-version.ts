import { installedAiMajor } from './ai-runtime.js';

/** The AI SDK generation each language model specification belongs to. */
const GENERATION: Readonly<Record<string, string>> = {
  v1: 'AI SDK 4',
  v2: 'AI SDK 5',
  v3: 'AI SDK 6',
  v4: 'AI SDK 7',
};

/** The providers of each AI SDK generation oncely drives, for the sentence saying what to install. */
const PROVIDERS: Readonly<Record<number, string>> = {
  6: '@ai-sdk/openai@3, @ai-sdk/anthropic@3, @ai-sdk/openai-compatible@2',
  7: '@ai-sdk/openai@4, @ai-sdk/anthropic@4, @ai-sdk/openai-compatible@3',
};

/**
 * Why a value cannot be used as oncely's language model, or undefined when it can. oncely drives
 * models through the AI SDK installed beside it: AI SDK 6 drives specification v3 models, AI SDK 7
 * v3 and v4. A model string ('openai/gpt-4.1', the AI SDK gateway's form), a model the installed
 * SDK cannot drive, or anything else gets a sentence saying what to install.
 */
export function modelProblem(
  model: unknown,
  aiMajor: number | undefined = installedAiMajor(),
): string | undefined {
  const sdk = aiMajor ?? 6;
  if (typeof model === 'string') {
    return (
      `"${model}" is a model id; give a model object made by a provider package, ` +
      `e.g. openai("gpt-4.1") from @ai-sdk/openai@${sdk >= 7 ? 4 : 3} (AI SDK ${sdk})`
    );
  }
  if (
    typeof model !== 'object' ||
    model === null ||
    typeof (model as { doGenerate?: unknown }).doGenerate !== 'function'
  ) {
    return 'must be an AI SDK language model (e.g. openai("gpt-4o-mini")) or scriptedModel([...])';
  }
  const version = String((model as { specificationVersion?: unknown }).specificationVersion);
  const drives = sdk >= 7 ? ['v3', 'v4'] : ['v3'];
  if (drives.includes(version)) return undefined;
  const generation = GENERATION[version] ?? 'an unknown AI SDK';
  if (version === 'v4') {
    return (
      `is a language model of specification v4 (${generation}), and the AI SDK installed is ${sdk}: ` +
      'install ai@7 (it needs Node.js 22 or later) beside oncely, or a provider of AI SDK 6 ' +
      `(${PROVIDERS[6]})`
    );
  }
  return (
    `is a language model of specification ${version} (${generation}); oncely drives models of ` +
    `${sdk >= 7 ? 'AI SDK 6 and 7 (specifications v3 and v4)' : 'AI SDK 6 (specification v3)'}: ` +
    `install a provider of that generation (${PROVIDERS[sdk >= 7 ? 7 : 6]})`
  );
}
