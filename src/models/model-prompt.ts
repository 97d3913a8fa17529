import type { LanguageModelV3, LanguageModelV3Message } from '@ai-sdk/provider';
import type { ModelMessage } from 'ai';
import { convertToLanguageModelPrompt, standardizePrompt } from 'ai/internal';

/**
 * A run's conversation as a provider takes it, validated and converted once per message.
 *
 * The AI SDK's `generateText` validates and converts the whole conversation on every call, so a
 * model step's own cost grows with the run's history. A run's messages only ever grow at the end
 * (a step appends the model's response and the tool results), so this keeps what it converted and,
 * at the next step, validates and converts only the messages added since — the same SDK functions
 * `generateText` uses, on less. A conversation that is not an extension of the last one (a resumed
 * run, a rewritten history) is converted whole, once.
 *
 * @example
 * const prompt = new ModelPrompt();
 * const turn = await callModel({ model, messages, tools, prompt }); // converts every message
 * const next = await callModel({ model, messages: [...messages, reply, results], tools, prompt }); // two
 */
export class ModelPrompt {
  /** The messages converted so far, by identity, and what they became. */
  #messages: readonly ModelMessage[] = [];
  #converted: LanguageModelV3Message[] = [];
  readonly #wellFormed: (message: ModelMessage) => boolean;

  /**
   * `wellFormed`: messages the caller built itself, well-formed by construction, are converted
   * without the SDK's schema check (a run's driver passes the messages it made: the model's response
   * with minted ids and the tool results; 0.18 ms a step). Every other message is checked once.
   */
  constructor(options: { readonly wellFormed?: (message: ModelMessage) => boolean } = {}) {
    this.#wellFormed = options.wellFormed ?? (() => false);
  }

  /** The provider's prompt for `messages` after `system`. Throws the SDK's error for a bad message. */
  async of(
    model: LanguageModelV3,
    system: string | undefined,
    messages: readonly ModelMessage[],
    signal?: AbortSignal,
  ): Promise<LanguageModelV3Message[]> {
    const known = this.#extends(messages) ? this.#messages.length : 0;
    const added = messages.slice(known);
    let converted = known === 0 ? [] : this.#converted;
    if (added.length > 0 || messages.length === 0) {
      // (An empty conversation goes to the SDK too, which refuses it.)
      // A tool message right after the known ones would merge into the last converted one: whole.
      const whole = known > 0 && added[0]?.role === 'tool';
      const from = whole ? [...messages] : added;
      const tail = await convert(model, from, this.#wellFormed, signal);
      converted = whole ? tail : [...converted, ...tail];
    }
    this.#messages = messages;
    this.#converted = converted;
    const head: LanguageModelV3Message[] =
      system === undefined || system === '' ? [] : [{ role: 'system', content: system }];
    return [...head, ...converted];
  }

  /** True when the last conversation converted is a prefix of `messages` (the same objects). */
  #extends(messages: readonly ModelMessage[]): boolean {
    const known = this.#messages;
    if (known.length === 0 || known.length > messages.length) return false;
    for (let i = 0; i < known.length; i++) if (known[i] !== messages[i]) return false;
    return true;
  }
}

/**
 * Validates (all but the well-formed) and converts messages with the SDK's own functions, as
 * `generateText` does.
 */
async function convert(
  model: LanguageModelV3,
  messages: ModelMessage[],
  wellFormed: (message: ModelMessage) => boolean,
  signal: AbortSignal | undefined,
): Promise<LanguageModelV3Message[]> {
  const unchecked = messages.filter((m) => !wellFormed(m));
  // The SDK's check throws for a bad message (and for an empty conversation).
  if (unchecked.length > 0 || messages.length === 0) await standardizePrompt({ messages: unchecked });
  return convertToLanguageModelPrompt({
    prompt: { system: undefined, messages },
    supportedUrls: await model.supportedUrls,
    download: undefined,
    ...(signal === undefined ? {} : { abortSignal: signal }),
  });
}
