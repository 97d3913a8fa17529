import type { ReconcileHook, ReconcileOutcome } from '../../tools/index.js';
import {
  MCP_CALL_RESULT,
  textOf,
  valueOf,
  type McpCallResult,
  type McpRequester,
  type OutputCheck,
} from './mcp-call.js';
import { MCP_KEY_STATUS_TOOL, type McpKeyStatus } from './meta.js';

/*
 * `reconcile: 'server'`: the reconcile hook of a tool whose server is guarded by `onceOnly`
 * (oncely/mcp-server) asks the server's lookup tool what became of the call's key. It only reads.
 * `completed` carries on with the stored result; `failed` (the server recorded that nothing was
 * applied) and never seen (within the time the server keeps keys: the server guards the tool, so a
 * late copy of the request would be caught by its key) let the call run again under the same key;
 * anything else is unknown, for an operator.
 */

/** The hook that settles a call of `tool` (its name on the server) through the server's lookup. */
export function serverReconcile(
  client: McpRequester,
  tool: string,
  output: OutputCheck | undefined,
  now: () => number,
): ReconcileHook {
  return async (record, ctx) => {
    const answer = (await client.request(
      {
        method: 'tools/call',
        params: { name: MCP_KEY_STATUS_TOOL, arguments: { key: record.idempotencyKey, tool } },
      },
      MCP_CALL_RESULT,
      { signal: ctx.signal },
    )) as McpCallResult;
    if (answer.isError === true) {
      return { status: 'unknown', reason: `the server's lookup answered an error: ${textOf(answer)}` };
    }
    const status = answer.structuredContent as McpKeyStatus | undefined;
    if (status === undefined || typeof status.status !== 'string') {
      return { status: 'unknown', reason: `the server's ${MCP_KEY_STATUS_TOOL} gave no status` };
    }
    return outcomeOf(status, tool, output, now() - Date.parse(record.attemptStartedAt));
  };
}

function outcomeOf(
  found: McpKeyStatus,
  tool: string,
  output: OutputCheck | undefined,
  ageMs: number,
): ReconcileOutcome {
  if (found.tool !== undefined && found.tool !== tool && found.status !== 'not_found') {
    return { status: 'unknown', reason: `the server used the key for another tool, "${found.tool}"` };
  }
  switch (found.status) {
    case 'completed': {
      const result = (found.result ?? {}) as McpCallResult;
      if (result.isError === true) {
        return {
          status: 'unknown',
          reason: `the tool ran and reported an error: ${textOf(result) || 'no text'}`,
        };
      }
      return { status: 'completed', value: valueOf(result, output) };
    }
    case 'failed':
      return { status: 'failed', reason: 'the server recorded that nothing was applied' };
    case 'not_found':
      return ageMs < found.keptForMs
        ? { status: 'failed', reason: 'the server never saw the key' }
        : {
            status: 'unknown',
            reason: `the server keeps keys for ${found.keptForMs} ms and this call is older: it may have forgotten it`,
          };
    case 'started':
      return {
        status: 'unknown',
        reason: `the server started the call at ${found.startedAt ?? '?'} and has not finished it (still running, or its process died)`,
      };
    case 'unknown':
      return {
        status: 'unknown',
        reason: `the server's handler failed mid-way: ${found.error ?? 'no message'}`,
      };
    default:
      return { status: 'unknown', reason: `the server does not guard "${tool}" by its key` };
  }
}
