import type { RegisteredTool } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod/v4';
import type { KeyRecord } from '../../receiver/index.js';
import { MCP_KEY_STATUS_TOOL, type McpKeyStatus } from '../mcp/meta.js';
import type { Guard, RequestExtra, ToolHandler } from './guard.js';

/*
 * `oncely_key_status`: what became of a key, for a reconcile hook (oncely/mcp's `reconcile:
 * 'server'`). It only reads. Asked with the tool too, it answers `not_guarded` for a tool onceOnly
 * does not guard (a read, or one registered some other way), whose calls no key can tell about.
 */

type Register = (name: string, config: object, handler: ToolHandler) => RegisteredTool;

export function registerKeyStatus(
  register: Register,
  guard: Guard,
  isGuarded: (tool: string) => boolean,
): void {
  register(
    MCP_KEY_STATUS_TOOL,
    {
      description:
        'What became of the call made with an idempotency key: completed (with its result), started, ' +
        'unknown, failed or not found. For reconcile hooks; it only reads.',
      inputSchema: { key: z.string().min(1).max(255), tool: z.string().min(1).optional() },
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async (...params: unknown[]) => {
      const { key, tool } = params[0] as { key: string; tool?: string };
      const extra = (params.at(-1) ?? {}) as RequestExtra;
      const store = await guard.store();
      const status: McpKeyStatus =
        tool !== undefined && !isGuarded(tool)
          ? { key, status: 'not_guarded', tool, keptForMs: store.keepForMs }
          : statusOf(key, await store.lookup(key, guard.scopeOf(extra)), store.keepForMs);
      const result: CallToolResult = {
        content: [{ type: 'text', text: JSON.stringify(status) }],
        structuredContent: status as unknown as Record<string, unknown>,
      };
      return result;
    },
  );
}

function statusOf(key: string, record: KeyRecord | undefined, keptForMs: number): McpKeyStatus {
  if (record === undefined) return { key, status: 'not_found', keptForMs };
  return {
    key,
    status: record.status,
    ...(record.subject === null ? {} : { tool: record.subject }),
    ...(record.status === 'completed' && record.response !== null
      ? { result: record.response as Record<string, unknown> }
      : {}),
    startedAt: record.startedAt,
    ...(record.settledAt === null ? {} : { settledAt: record.settledAt }),
    ...(record.error === null ? {} : { error: record.error }),
    keptForMs,
  };
}
