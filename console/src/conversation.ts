import {
  api,
  runEvents,
  ApiError,
  type LoopRun,
  type Run,
  type RunEvent,
  type ToolExecution,
} from './api.js';
import { badge, h, link, replace, type Child } from './dom.js';
import { brief, callHref } from './common.js';

/*
 * A run's conversation as an operator reads it: the user's input and the model's steps, each call it
 * asked for linked to its record. An oncely run's steps are its `model.response` events; a run of an
 * application's own loop (`oncely/ai-sdk`, `oncely/openai-agents`) has its recorded responses.
 */

/** The run's conversation up to the model step that asked for this call. */
export async function showConversation(
  into: HTMLElement,
  r: ToolExecution,
  signal: AbortSignal,
): Promise<void> {
  try {
    let run: Run | undefined;
    try {
      run = await api<Run>('GET', `/v1/runs/${encodeURIComponent(r.run_id)}`);
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) throw error;
    }
    const list =
      run === undefined
        ? loopConversation(
            await api<LoopRun>('GET', `/v1/loop-runs/${encodeURIComponent(r.run_id)}`),
            r.tool_call_id,
          )
        : await agentConversation(run, r, signal);
    if (!signal.aborted) replace(into, list);
  } catch (error) {
    if (signal.aborted) return;
    replace(
      into,
      h(
        'p',
        { class: 'notice notice-error' },
        `The conversation could not be read: ${(error as Error).message}`,
      ),
    );
  }
}

async function agentConversation(run: Run, r: ToolExecution, signal: AbortSignal): Promise<HTMLElement> {
  const items: Child[] = [
    h(
      'li',
      { class: 'turn user' },
      h('strong', {}, 'User: '),
      typeof run.input === 'string' ? run.input : brief(run.input, 400),
    ),
  ];
  const stop = new AbortController();
  const timer = window.setTimeout(() => stop.abort(), 3_000);
  signal.addEventListener('abort', () => stop.abort());
  try {
    for await (const e of runEvents(r.run_id, stop.signal)) {
      const item = eventItem(e, r.tool_call_id);
      if (item !== null) items.push(item);
      const calls = (e.data.calls ?? []) as { toolCallId: string }[];
      if (e.type === 'model.response' && calls.some((c) => c.toolCallId === r.tool_call_id)) break;
    }
  } catch (error) {
    if (!stop.signal.aborted) throw error;
  } finally {
    window.clearTimeout(timer);
    stop.abort();
  }
  return h('ol', { class: 'conversation' }, items);
}

/** An oncely run's event as a turn of its conversation, or null for events that are not one. */
export function eventItem(e: RunEvent, highlight?: string): HTMLElement | null {
  if (e.type === 'model.response') {
    const calls = (e.data.calls ?? []) as { toolCallId: string; toolName: string }[];
    const text = typeof e.data.text === 'string' ? e.data.text : '';
    return h(
      'li',
      { class: 'turn model' },
      h('strong', {}, `Model (step ${String(e.data.step)}): `),
      text === '' ? null : text,
      calls.length === 0
        ? null
        : h(
            'ul',
            {},
            calls.map((c) =>
              h(
                'li',
                { class: c.toolCallId === highlight ? 'this-call' : undefined },
                `asks ${c.toolName} (${c.toolCallId})`,
                c.toolCallId === highlight ? ' ← this call' : '',
              ),
            ),
          ),
    );
  }
  if (e.type === 'run.message') {
    return h(
      'li',
      { class: 'turn user' },
      `A new message: turn ${String(e.data.turn)} (${String(e.data.clientMessageId)})`,
    );
  }
  if (e.type === 'tool.settled') {
    return h(
      'li',
      { class: 'turn tool' },
      `${String(e.data.toolName)} ${String(e.data.key)}: the model heard ${String(e.data.heard)}`,
    );
  }
  return null;
}

/**
 * A loop's recorded responses as a conversation, each call linked to its record with its status;
 * with `upTo`, only up to the step that asked for that call.
 */
export function loopConversation(run: LoopRun, upTo?: string): HTMLElement {
  const statusOf = new Map(run.calls.map((c) => [c.idempotency_key, c.status]));
  const items: Child[] = [];
  for (const step of run.steps) {
    const texts = step.parts.flatMap((p) => (p.type === 'text' ? [p.text] : []));
    const reasoning = step.parts.flatMap((p) => (p.type === 'reasoning' && p.text !== '' ? [p.text] : []));
    const calls = step.parts.flatMap((p) => (p.type === 'tool-call' ? [p] : []));
    items.push(
      h(
        'li',
        { class: 'turn model' },
        h('strong', {}, `Model (step ${step.step + 1}, ${step.model_id}): `),
        texts.join('\n'),
        reasoning.length === 0
          ? null
          : h(
              'details',
              {},
              h('summary', {}, 'Reasoning'),
              h('p', { class: 'reasoning' }, reasoning.join('\n')),
            ),
        calls.length === 0
          ? null
          : h(
              'ul',
              {},
              calls.map((c) => {
                const status = c.idempotency_key === null ? undefined : statusOf.get(c.idempotency_key);
                return h(
                  'li',
                  { class: c.tool_call_id === upTo ? 'this-call' : undefined },
                  'asks ',
                  c.idempotency_key === null
                    ? `${c.tool_name} (${c.tool_call_id}${c.provider_executed ? ', run by the provider' : ''})`
                    : link(callHref(c.idempotency_key), `${c.tool_name} (${c.tool_call_id})`),
                  ' ',
                  h('code', {}, brief(c.input, 120)),
                  status === undefined ? null : [' ', badge(status)],
                  c.tool_call_id === upTo ? ' ← this call' : '',
                );
              }),
            ),
      ),
    );
    if (upTo !== undefined && calls.some((c) => c.tool_call_id === upTo)) break;
  }
  if (items.length === 0) {
    return h(
      'p',
      { class: 'empty' },
      'No model response is recorded for this run: its calls were made directly.',
    );
  }
  return h('ol', { class: 'conversation' }, items);
}
