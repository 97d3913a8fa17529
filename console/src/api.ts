/*
 * The console talks to the same HTTP API as the CLI, with the operator's API key in the
 * Authorization header. The key lives in this tab's sessionStorage: never in a URL, a cookie or the
 * page, and gone when the tab closes.
 */

const STORAGE = 'oncely.console.key';

export interface Me {
  readonly key_id: string;
  readonly tenant_id: string;
  readonly actor_id: string;
  readonly role: 'viewer' | 'operator' | 'admin';
}

export interface Actor {
  readonly kind: string;
  readonly id: string;
}

export interface ToolExecution {
  readonly idempotency_key: string;
  readonly run_id: string;
  readonly tool_call_id: string;
  readonly tool_name: string;
  readonly effect: string;
  readonly status: string;
  readonly attempt: number;
  readonly version: number;
  readonly args: unknown;
  readonly result: unknown;
  readonly result_reference: string | null;
  readonly error: { readonly code: string; readonly message: string } | null;
  readonly compensation_of: string | null;
  readonly created_at: string;
  readonly updated_at: string;
  readonly attempt_started_at: string;
  readonly settled_at: string | null;
  readonly settled_by: Actor | null;
  readonly attempt_timeout_ms: number;
  readonly conflict_at: string | null;
}

export interface HistoryEntry {
  readonly id: number;
  readonly at: string;
  readonly kind: string;
  readonly actor: Actor;
  readonly via: string;
  readonly from: string | null;
  readonly to: string | null;
  readonly attempt: number;
  readonly reason: string | null;
  readonly detail: unknown;
}

export interface Approval {
  readonly idempotency_key: string;
  readonly run_id: string;
  readonly tool_name: string;
  readonly args: unknown;
  /** Asked for because the call repeats this earlier call (its key); null for a tool's own approval. */
  readonly repeat_of: string | null;
  /** That earlier call as it stands now; null when this is not a repeat. */
  readonly earlier: ToolExecution | null;
  readonly status: string;
  readonly decided_by: string | null;
  readonly reason: string | null;
  readonly created_at: string;
  readonly decided_at: string | null;
}

export interface Run {
  readonly run_id: string;
  readonly agent: string;
  readonly status: string;
  readonly input: unknown;
  readonly result: unknown;
  readonly error: { readonly code: string; readonly message: string } | null;
  readonly status_reason: string | null;
  readonly step: number;
  readonly pending_calls: readonly { idempotency_key: string; tool_name: string; heard: string | null }[];
  readonly lease: { owner: string | null; epoch: number; expires_at: string | null };
  readonly turn: number;
  readonly usage: {
    readonly input_tokens: number;
    readonly output_tokens: number;
    readonly total_tokens: number;
  };
  readonly token_budget: number | null;
  readonly created_at: string;
  readonly updated_at: string;
}

export interface Worker {
  readonly worker_id: string | null;
  readonly kind: string;
  /** Null for all but admins: where a worker runs is the deployment's, not a tenant's. */
  readonly host: string | null;
  readonly pid: number | null;
  readonly concurrency: number;
  readonly version: string;
  readonly stopping: boolean;
  readonly live: boolean;
  readonly started_at: string;
  readonly last_heartbeat_at: string;
  readonly runs: readonly { run_id: string; agent: string; lease_epoch: number }[];
}

export interface Page<T> {
  readonly items: T[];
  readonly next_cursor: string | null;
}

export interface RunEvent {
  readonly id: number;
  readonly at: string;
  readonly type: string;
  readonly data: Record<string, unknown>;
}

/** An answer other than 2xx, in the API's error envelope; `body` holds the rest (the current record). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly body: Record<string, unknown>,
  ) {
    super(message);
  }
}

export function storedKey(): string | null {
  return sessionStorage.getItem(STORAGE);
}

export function keepKey(key: string): void {
  sessionStorage.setItem(STORAGE, key);
}

export function forgetKey(): void {
  sessionStorage.removeItem(STORAGE);
}

function headers(key: string | null, json: boolean): HeadersInit {
  const h: Record<string, string> = { accept: 'application/json' };
  if (key !== null) h.authorization = `Bearer ${key}`;
  if (json) h['content-type'] = 'application/json';
  return h;
}

export async function api<T>(
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
  key = storedKey(),
): Promise<T> {
  const response = await fetch(path, {
    method,
    headers: headers(key, body !== undefined),
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    cache: 'no-store',
    credentials: 'omit',
  });
  const text = await response.text();
  const parsed = (text === '' ? {} : JSON.parse(text)) as Record<string, unknown>;
  if (!response.ok) {
    const error = (parsed.error ?? {}) as { code?: string; message?: string };
    throw new ApiError(
      response.status,
      error.code ?? `HTTP_${response.status}`,
      error.message ?? response.statusText,
      parsed,
    );
  }
  return parsed as T;
}

export const q = (params: Record<string, string | number | undefined>): string => {
  const search = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') search.set(k, String(v));
  const s = search.toString();
  return s === '' ? '' : `?${s}`;
};

/** One server-sent event: its name (`message` when unnamed) and its data. */
interface ServerEvent {
  readonly event: string;
  readonly data: string;
}

/**
 * A server-sent-event stream, read with fetch so the key goes in a header (EventSource cannot send
 * one). Ends when the stream does or `signal` aborts.
 */
async function* serverEvents(path: string, signal: AbortSignal): AsyncGenerator<ServerEvent> {
  const response = await fetch(path, {
    headers: { ...headers(storedKey(), false), accept: 'text/event-stream' },
    cache: 'no-store',
    credentials: 'omit',
    signal,
  });
  if (!response.ok || response.body === null) {
    throw new ApiError(response.status, `HTTP_${response.status}`, `${path} could not be read`, {});
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
        const lines = buffer.slice(0, end).split('\n');
        buffer = buffer.slice(end + 2);
        const field = (name: string) =>
          lines.filter((l) => l.startsWith(`${name}:`)).map((l) => l.slice(name.length + 1).trimStart());
        const data = field('data').join('\n');
        if (data !== '') yield { event: field('event')[0] ?? 'message', data };
      }
    }
  } finally {
    reader.releaseLock();
  }
}

/** A run's events, in order, then new ones as they are written, until the run has ended. */
export async function* runEvents(runId: string, signal: AbortSignal): AsyncGenerator<RunEvent> {
  for await (const e of serverEvents(`/v1/runs/${encodeURIComponent(runId)}/events`, signal)) {
    const parsed = JSON.parse(e.data) as Partial<RunEvent>;
    if (typeof parsed.id === 'number' && typeof parsed.type === 'string') yield parsed as RunEvent;
  }
}

export interface InboxCounts {
  readonly unknown: number;
  readonly conflicts: number;
  readonly pending_approvals: number;
  readonly capped: boolean;
}

/** The tenant's inbox counts: at once, then each time they change. */
export async function* inboxEvents(signal: AbortSignal): AsyncGenerator<InboxCounts> {
  for await (const e of serverEvents('/v1/inbox/events', signal)) {
    if (e.event === 'inbox') yield JSON.parse(e.data) as InboxCounts;
  }
}

export interface WorkflowNode {
  readonly name: string;
  readonly agent: string;
  readonly state: string;
  readonly reason: string | null;
  readonly attempts: readonly { attempt: number; run_id: string; status: string | null }[];
  /** Its failed run's non-read calls that took effect or may have: a retry could repeat them. */
  readonly standing_calls: readonly {
    idempotency_key: string;
    tool_name: string;
    status: string;
    conflict: boolean;
    result_reference: string | null;
  }[];
}

export interface WorkflowRun {
  readonly workflow_run_id: string;
  readonly workflow: string;
  readonly status: string;
  readonly status_reason: string | null;
  readonly input: unknown;
  readonly result: unknown;
  readonly error: { code: string; message: string } | null;
  readonly created_at: string;
  readonly updated_at: string;
  readonly nodes?: readonly WorkflowNode[];
}

export type LoopPart =
  | { readonly type: 'text' | 'reasoning'; readonly text: string }
  | {
      readonly type: 'tool-call';
      readonly tool_call_id: string;
      readonly tool_name: string;
      readonly input: unknown;
      readonly provider_executed: boolean;
      readonly idempotency_key: string | null;
    }
  | { readonly type: 'other'; readonly kind: string };

/** A run of an application's own loop (`oncely/ai-sdk`, `oncely/openai-agents`): no row in runs. */
export interface LoopRun {
  readonly run_id: string;
  readonly framework: 'ai-sdk' | 'openai-agents' | null;
  readonly steps: readonly {
    readonly step: number;
    readonly framework: string;
    readonly model_id: string;
    readonly created_at: string;
    readonly usage: { input_tokens: number; output_tokens: number; total_tokens: number } | null;
    readonly parts: readonly LoopPart[];
  }[];
  readonly calls: readonly ToolExecution[];
  readonly unknown_calls: number;
  readonly created_at: string;
  readonly updated_at: string;
}

export interface IncidentGroup {
  readonly tool_name: string;
  readonly downstream: string | null;
  readonly effect: string;
  readonly can_ask_hook: boolean;
  readonly count: number;
  readonly oldest_attempt_started_at: string;
  readonly calls: readonly ToolExecution[];
}

export interface Incidents {
  readonly q: string | null;
  readonly unknown: number;
  readonly matched: number;
  readonly capped: boolean;
  readonly groups: readonly IncidentGroup[];
}

export interface ResolvedTogether {
  readonly together: string;
  readonly settled: readonly ToolExecution[];
  readonly moved_on: readonly {
    idempotency_key: string;
    code: string;
    message: string;
    record: ToolExecution | null;
  }[];
}

export interface HookAsked {
  readonly record: ToolExecution;
  readonly said: HistoryEntry | null;
}

/** Asks a call's reconcile hook now; what it said is recorded in the call's history. */
export const askHook = (key: string): Promise<HookAsked> =>
  api<HookAsked>('POST', `/v1/tool-executions/${encodeURIComponent(key)}/reconcile`, {});

/** What a hook asked now said, in words; `key` names the call where the page lists several. */
export function hookWords(asked: HookAsked, key?: string): string {
  const { said } = asked;
  const hook = key === undefined ? 'The hook' : `The hook of ${key}`;
  if (said === null) return `${hook} was asked; its answer was not recorded.`;
  if (said.to === null) return `${hook} could not tell: ${said.reason ?? 'no reason'}.`;
  return `${hook} found ${key ?? 'it'} ${said.to}${said.reason == null ? '' : `: ${said.reason}`}`;
}
