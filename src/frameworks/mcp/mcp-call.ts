import { z } from 'zod/v4';
import { OncelyError, ToolNotAttemptedError } from '../../errors/index.js';
import { toolInputOf, type ToolContext, type ToolInput } from '../../tools/index.js';
import { MCP_KEY_ARGUMENT, MCP_KEY_META, MCP_NOT_APPLIED_META } from './meta.js';

/*
 * One `tools/call` of an MCP tool, and what its answer or error means for the ledger. Only what
 * provably ran nothing is "not attempted": a client with no connection (nothing is sent), or a server
 * that answers JSON-RPC -32601 (it has no such method, so it ran nothing). Everything after the
 * request left is either the tool's answer or unknown. In particular JSON-RPC -32602 is not a
 * refusal: servers built on the SDK's McpServer before it reported its own output check as a tool
 * error answered -32602 *after* running the tool, and the SDK client's `callTool` throws -32602 when
 * the result breaks the tool's listed output schema, after the server ran it. So the call is sent
 * with `request` and a schema that takes any result, and the output schema is checked here: a result
 * that breaks it took effect all the same, and is recorded as the server sent it, with a note.
 */

/** What the model is told about a result that breaks the output schema its server lists. */
export const MCP_OUTPUT_MISMATCH_NOTE =
  'The tool ran and its effect stands. Its result does not match the output schema the server lists, ' +
  'so it is given here as the server sent it.';

/** Any JSON-RPC result object: the SDK parses the answer with it, and checks nothing of its own. */
export const MCP_CALL_RESULT = z.record(z.string(), z.unknown());

/** JSON-RPC "method not found": the server has no `tools/call`, so nothing ran. */
const METHOD_NOT_FOUND = -32601;

export interface McpCallParams {
  readonly name: string;
  readonly arguments?: Record<string, unknown>;
  readonly _meta?: Record<string, unknown>;
}

export interface McpCallResult {
  readonly content?: readonly unknown[];
  readonly structuredContent?: unknown;
  readonly isError?: boolean;
  readonly _meta?: Record<string, unknown>;
  readonly [key: string]: unknown;
}

/** What a call needs of the client: `request` and `transport` of @modelcontextprotocol/sdk's Client. */
export interface McpRequester {
  /**
   * Sends one request and parses its result with `resultSchema`; when the server answers a JSON-RPC
   * error, rejects with an error whose numeric `code` is the server's (the SDK's `McpError`).
   */
  request(
    request: { method: 'tools/call'; params: McpCallParams },
    resultSchema: typeof MCP_CALL_RESULT,
    options?: { signal?: AbortSignal; timeout?: number },
  ): Promise<unknown>;
  /** Undefined while the client is not connected (the SDK's Client), when nothing can be sent. */
  readonly transport?: unknown;
}

/** A tool's listed output schema, compiled: the problems of a result's structured content. */
export type OutputCheck = (structured: unknown) => string[];

/** The check of an output schema, or undefined for a tool that lists none. */
export function outputCheckOf(tool: string, schema: object | undefined): OutputCheck | undefined {
  if (schema === undefined) return undefined;
  let input: ToolInput;
  try {
    input = toolInputOf(schema);
  } catch (cause) {
    throw new OncelyError(
      'TOOL_DEFINITION_INVALID',
      `the MCP tool "${tool}" lists an output schema that ${messageOf(cause)}`,
      { cause },
    );
  }
  return (structured) => {
    const checked = input.check(structured);
    return checked.ok ? [] : checked.problems.map((p) => p.replace(/^\(arguments\)/, '(result)'));
  };
}

export interface CallPlan {
  readonly takesKey: boolean;
  readonly timeoutMs: number;
  readonly output: OutputCheck | undefined;
}

export async function callMcpTool(
  client: McpRequester,
  name: string,
  args: Record<string, unknown>,
  ctx: ToolContext,
  plan: CallPlan,
): Promise<unknown> {
  if ('transport' in client && client.transport === undefined) {
    throw new ToolNotAttemptedError(
      `the MCP client is not connected, so the call to "${name}" was not sent; reconnect it, then the call can run again`,
    );
  }
  let answer: unknown;
  try {
    answer = await client.request(
      {
        method: 'tools/call',
        params: {
          name,
          arguments: plan.takesKey ? { ...args, [MCP_KEY_ARGUMENT]: ctx.idempotencyKey } : args,
          _meta: { [MCP_KEY_META]: ctx.idempotencyKey },
        },
      },
      MCP_CALL_RESULT,
      // oncely's own timeout aborts the signal first; the client's is a backstop past it.
      { signal: ctx.signal, timeout: plan.timeoutMs + 5_000 },
    );
  } catch (error) {
    if (codeOf(error) === METHOD_NOT_FOUND) {
      throw new ToolNotAttemptedError(
        `the MCP server refused the call before running it: ${messageOf(error)}`,
        { cause: error },
      );
    }
    throw error; // it may have run: a lost connection, a timeout, any other JSON-RPC error is unknown
  }
  const result = answer as McpCallResult;
  if (result.isError === true) {
    const text = textOf(result) || 'the tool reported an error';
    // The server ran the tool and says it failed; only it can say that nothing was applied.
    if (result._meta?.[MCP_NOT_APPLIED_META] === true) throw new ToolNotAttemptedError(text);
    throw new Error(`the MCP tool "${name}" reported an error: ${text}`);
  }
  return valueOf(result, plan.output);
}

/**
 * The value recorded for a successful result: its structured content (the content blocks when it
 * has none); when the tool lists an output schema the result breaks, what the server sent with the
 * problems and a note, for the tool ran all the same.
 */
export function valueOf(result: McpCallResult, output: OutputCheck | undefined): unknown {
  const structured = result.structuredContent ?? undefined;
  const content = result.content ?? [];
  if (output === undefined) return structured ?? { content };
  const problems = structured === undefined ? ['(result): no structured content'] : output(structured);
  if (problems.length === 0) return structured;
  return {
    ...(structured === undefined ? {} : { structuredContent: structured }),
    content,
    problems,
    note: MCP_OUTPUT_MISMATCH_NOTE,
  };
}

function codeOf(error: unknown): unknown {
  return (error as { code?: unknown } | null)?.code;
}

export function textOf(result: McpCallResult): string {
  return (result.content ?? [])
    .flatMap((c) => (isObject(c) && c.type === 'text' && typeof c.text === 'string' ? [c.text] : []))
    .join('\n');
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}
