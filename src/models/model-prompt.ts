import type { LanguageModelV3, LanguageModelV3Message } from '@ai-sdk/provider';
import type { ModelMessage } from 'ai';
import { aiRuntime } from './ai-runtime.js';

/**
 * A run's conversation as a provider takes it, validated and converted once per message.
 *
 * The AI SDK's `generateText` validates and converts the whole conversation on every call, so a
 * model step's own cost grows with the run's history. A run's messages only ever grow at the end
 * (a step appends the model's response and the tool results), so this keeps what it converted and,
 * at the next step, validates and converts only the messages added since — the same SDK functions
 * `generateText` uses, on less. A conversation that is not an extension of the last one (a resumed
 * run, a rewritten history: other objects) is converted whole, once.
 *
 * @example
 * const prompt = new ModelPrompt();
 * const turn = await callModel({ model, messages, tools, prompt }); // converts every message
 * const next = await callModel({ model, messages: [...messages, reply, results], tools, prompt }); // two
 */
export class ModelPrompt {
  /** How many messages were converted, and the first and last of them, by identity. */
  #count = 0;
  #first: ModelMessage | undefined;
  #last: ModelMessage | undefined;
  /** The system prompt the provider's prompt starts with, and that prompt (system, then converted). */
  #system: string | undefined;
  #sent: LanguageModelV3Message[] = [];
  readonly #wellFormed: (message: ModelMessage) => boolean;

  /**
   * `wellFormed`: messages the caller built itself, well-formed by construction, are converted
   * without the SDK's schema check (a run's driver passes the messages it made: the model's response
   * with minted ids and the tool results; 0.18 ms a step). Every other message is checked once.
   */
  constructor(options: { readonly wellFormed?: (message: ModelMessage) => boolean } = {}) {
    this.#wellFormed = options.wellFormed ?? (() => false);
  }

  /**
   * The provider's prompt for `messages` after `system`. Throws the SDK's error for a bad message.
   * Its work grows with the messages added since the last call (and a copy of the list, as a
   * provider or middleware may keep the prompt it was given).
   */
  async of(
    model: LanguageModelV3,
    system: string | undefined,
    messages: readonly ModelMessage[],
    signal?: AbortSignal,
  ): Promise<LanguageModelV3Message[]> {
    const head = system === undefined || system === '' ? undefined : system;
    const known = head === this.#system && this.#extends(messages) ? this.#count : 0;
    const added = messages.slice(known);
    // A tool message right after the known ones would merge into the last converted one: whole.
    const whole = known === 0 || added[0]?.role === 'tool';
    if (whole) {
      // (An empty conversation goes to the SDK too, which refuses it.)
      const converted = await convert(model, [...messages], this.#wellFormed, signal);
      this.#sent = head === undefined ? converted : [{ role: 'system', content: head }, ...converted];
    } else if (added.length > 0) {
      this.#sent.push(...(await convert(model, added, this.#wellFormed, signal)));
    }
    this.#system = head;
    this.#count = messages.length;
    this.#first = messages[0];
    this.#last = messages[messages.length - 1];
    return this.#sent.slice();
  }

  /**
   * True when `messages` extends the conversation last converted: at least as long, with the same
   * first message and the last known one in its place (a run's messages only grow at the end; a
   * resumed run or a rewritten history reads new objects).
   */
  #extends(messages: readonly ModelMessage[]): boolean {
    const count = this.#count;
    if (count === 0 || count > messages.length) return false;
    return messages[0] === this.#first && messages[count - 1] === this.#last;
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
  const sdk = await aiRuntime();
  const unchecked = messages.filter((m) => !wellFormed(m));
  // The SDK's schema check throws for a bad message (and for an empty conversation).
  if (unchecked.length > 0 || messages.length === 0)
    await sdk.checkMessages(messages.length === 0 ? [] : unchecked);
  return sdk.convertMessages(model, messages, signal);
}
