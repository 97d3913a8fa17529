import { modelMessageSchema, type ModelMessage } from 'ai';
import { convertToLanguageModelPrompt, standardizePrompt } from 'ai/internal';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ModelPrompt } from './model-prompt.js';
import { scriptedModel } from './scripted-model.js';

/**
 * How many messages were checked against the SDK's ModelMessage schema, one check each (AI SDK 6's
 * own whole-prompt check, used by the comparison below, runs the schema without this method).
 */
const checks = vi.spyOn(modelMessageSchema, 'safeParseAsync');
const validated = {
  get messages(): number {
    return checks.mock.calls.length;
  },
};

afterEach(() => {
  checks.mockClear();
});

const model = scriptedModel([]);

/** One model step as a run records it: the response with a call, then the call's result. */
function step(n: number): ModelMessage[] {
  const id = `call_${n}`;
  return [
    {
      role: 'assistant',
      content: [
        { type: 'text', text: `step ${n}` },
        { type: 'tool-call', toolCallId: id, toolName: 'lookup', input: { n } },
      ],
    },
    {
      role: 'tool',
      content: [
        {
          type: 'tool-result',
          toolCallId: id,
          toolName: 'lookup',
          output: { type: 'json', value: { n, found: true } },
        },
      ],
    },
  ];
}

/** What generateText would send: the whole conversation validated and converted at once. */
async function whole(system: string | undefined, messages: ModelMessage[]) {
  const prompt = await standardizePrompt({ ...(system === undefined ? {} : { system }), messages });
  return convertToLanguageModelPrompt({ prompt, supportedUrls: {}, download: undefined });
}

describe('ModelPrompt', () => {
  it('gives at every step what converting the whole conversation gives, validating each message once', async () => {
    const prompt = new ModelPrompt();
    let messages: ModelMessage[] = [{ role: 'user', content: 'Refund order o_1' }];
    for (let n = 1; n <= 12; n++) {
      expect(await prompt.of(model, 'Be brief.', messages)).toEqual(await whole('Be brief.', messages));
      messages = [...messages, ...step(n)];
    }
    const steps = 12;
    const sent = 1 + 2 * (steps - 1); // the messages given to the prompt over the run
    // The prompt validated each message once.
    expect(validated.messages).toBe(sent);
  });

  it('refuses a message that is not a model message when it is added, as the SDK does', async () => {
    const prompt = new ModelPrompt();
    const messages: ModelMessage[] = [{ role: 'user', content: 'hi' }];
    await prompt.of(model, undefined, messages);
    const broken = [
      ...messages,
      { role: 'assistant', content: [{ type: 'bogus' }] } as unknown as ModelMessage,
    ];
    await expect(prompt.of(model, undefined, broken)).rejects.toThrow(/Invalid prompt/i);
  });

  it('converts a conversation that does not extend the last one whole (a resumed run reads new objects)', async () => {
    const prompt = new ModelPrompt();
    const first: ModelMessage[] = [{ role: 'user', content: 'one' }, ...step(1)];
    await prompt.of(model, undefined, first);
    const reread = JSON.parse(JSON.stringify([...first, ...step(2)])) as ModelMessage[];
    const before = validated.messages;
    expect(await prompt.of(model, undefined, reread)).toEqual(await whole(undefined, reread));
    expect(validated.messages - before).toBe(reread.length); // whole
  });

  it('converts whole when the added messages start with tool results (they merge into the last)', async () => {
    const prompt = new ModelPrompt();
    const known: ModelMessage[] = [{ role: 'user', content: 'one' }, ...step(1)];
    await prompt.of(model, undefined, known);
    const more = step(1)[1] as ModelMessage; // a second tool message right after the first
    const messages = [...known, more];
    const sent = await prompt.of(model, undefined, messages);
    expect(sent).toEqual(await whole(undefined, messages));
    expect(sent.filter((m) => m.role === 'tool')).toHaveLength(1);
  });

  it('converts the messages its caller built without checking them, and checks every other once', async () => {
    const built = new WeakSet<object>();
    const prompt = new ModelPrompt({ wellFormed: (m) => built.has(m) });
    let messages: ModelMessage[] = [{ role: 'user', content: 'Refund order o_1' }];
    for (let n = 1; n <= 6; n++) {
      const sent = await prompt.of(model, 'Be brief.', messages);
      expect(sent).toEqual(await whole('Be brief.', messages));
      const added = step(n);
      added.forEach((m) => built.add(m));
      messages = [...messages, ...added];
    }
    expect(validated.messages).toBe(1); // the user's message, once; the steps' messages never

    // A message it did not build is checked, and refused when it is not a model message.
    const broken = { role: 'assistant', content: [{ type: 'bogus' }] } as unknown as ModelMessage;
    await expect(prompt.of(model, undefined, [...messages, broken])).rejects.toThrow(/Invalid prompt/i);
  });

  it('never changes a prompt it handed out (a provider or middleware may keep it)', async () => {
    const prompt = new ModelPrompt();
    const messages: ModelMessage[] = [{ role: 'user', content: 'one' }];
    const first = await prompt.of(model, undefined, messages);
    const kept = JSON.stringify(first);
    await prompt.of(model, undefined, [...messages, ...step(1)]);
    expect(JSON.stringify(first)).toBe(kept);
    expect(first).toHaveLength(1);
  });

  it('refuses an empty conversation, as the SDK does', async () => {
    await expect(new ModelPrompt().of(model, undefined, [])).rejects.toThrow(/must not be empty/);
  });
});
