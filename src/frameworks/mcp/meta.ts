/*
 * What oncely's MCP client (`oncely/mcp`) and its server helper (`oncely/mcp-server`) say to each
 * other: the names in a request's or a result's `_meta`, and the lookup tool a guarded server lists.
 * Plain constants and types, so either side loads without the other.
 */

/** Where the key travels in a `tools/call` request's `_meta`. */
export const MCP_KEY_META = 'oncely/idempotencyKey';
/** A server that wants the key as an argument declares this property; oncely fills it, the model never sees it. */
export const MCP_KEY_ARGUMENT = 'idempotency_key';
/** An error result whose `_meta` carries this as true says nothing was applied: the call is `failed`, not unknown. */
export const MCP_NOT_APPLIED_META = 'oncely/notApplied';
/** A guarded server's result sent again for a repeat of its key carries this as true in `_meta`. */
export const MCP_REPLAYED_META = 'oncely/replayed';
/** A guarded server's error result about the key itself says why here (`in_progress`, `mismatch`, ...). */
export const MCP_KEY_REFUSAL_META = 'oncely/keyRefusal';
/**
 * The lookup tool a server guarded by `onceOnly` lists: `{ key, tool? }` → what became of that key
 * (`McpKeyStatus` as its structured content). `mcpTools` never offers it to the model.
 */
export const MCP_KEY_STATUS_TOOL = 'oncely_key_status';

/** What became of a key, as the lookup tool answers. */
export interface McpKeyStatus {
  readonly key: string;
  /**
   * `completed` (its result stored), `started` (running, or its process died mid-way), `unknown`
   * (its handler threw mid-way), `failed` (nothing applied; a repeat runs it again), `not_found`
   * (never seen, or forgotten after `keptForMs`), `not_guarded` (the tool asked about is not guarded).
   */
  readonly status: 'completed' | 'started' | 'unknown' | 'failed' | 'not_found' | 'not_guarded';
  /** The tool the key was used for. */
  readonly tool?: string;
  /** The stored result of a completed key, as the tool returned it. */
  readonly result?: Record<string, unknown>;
  readonly startedAt?: string;
  readonly settledAt?: string;
  /** What a handler that threw said, or the reason a key was settled by hand. */
  readonly error?: string;
  /** How long the server keeps a completed or failed key; an older call may be forgotten. */
  readonly keptForMs: number;
}
