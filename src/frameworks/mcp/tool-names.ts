import { OncelyError } from '../../errors/index.js';

/*
 * The name an MCP server's tool gets as an oncely tool, which is the name the model calls it by.
 * OpenAI, Anthropic and Gemini all take `^[a-zA-Z0-9_-]{1,64}$`; MCP tool names may also hold `.`,
 * `/` and more. The rule: the prefix, then `_` (unless the prefix already ends in `_` or `-`), then
 * the server's name with every other character made `_`. A prefix is the caller's and is refused,
 * not rewritten, when it holds another character; a name over 64 characters, or two server tools
 * that come out as one name, are refused naming the tools: nothing is renamed behind anyone's back.
 */

/** What every provider takes as a tool's name. */
export const PROVIDER_TOOL_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const MAX_NAME = 64;

/** Refuses a prefix that is not made of A-Z a-z 0-9 _ - (at most 63 characters). */
export function assertToolPrefix(prefix: string): void {
  if (/^[A-Za-z0-9_-]{0,63}$/.test(prefix)) return;
  throw new OncelyError(
    'TOOL_DEFINITION_INVALID',
    `the MCP tool prefix ${JSON.stringify(prefix)} is not valid: use up to 63 characters of A-Z a-z 0-9 _ - ` +
      '(tool names must be valid for every model provider)',
  );
}

/**
 * The oncely name of a server's tool under a prefix: `billing` + `issue_credit` →
 * `billing_issue_credit` (as does `billing_`); `crm` + `notes.add` → `crm_notes_add`.
 */
export function mcpToolName(prefix: string, serverName: string): string {
  const joined = prefix === '' || /[_-]$/.test(prefix) ? prefix : `${prefix}_`;
  return `${joined}${serverName.replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

/**
 * The oncely names of the server tools taken, by server name. Refuses (`TOOL_DEFINITION_INVALID`)
 * a name over 64 characters or two tools that would share one, saying which and what to do.
 */
export function mcpToolNames(prefix: string, serverNames: readonly string[]): Map<string, string> {
  assertToolPrefix(prefix);
  const names = new Map<string, string>();
  const byName = new Map<string, string>();
  for (const serverName of serverNames) {
    const name = mcpToolName(prefix, serverName);
    if (!PROVIDER_TOOL_NAME.test(name)) {
      throw new OncelyError(
        'TOOL_DEFINITION_INVALID',
        `the MCP tool "${serverName}" would be named "${name}", which is ${name.length} characters; ` +
          `model providers take at most ${MAX_NAME}: give a shorter prefix, or leave the tool out with \`only\``,
      );
    }
    const other = byName.get(name);
    if (other !== undefined) {
      throw new OncelyError(
        'TOOL_DEFINITION_INVALID',
        `the MCP tools "${other}" and "${serverName}" would both be named "${name}" (a tool name takes only ` +
          'A-Z a-z 0-9 _ -, other characters become _); leave one out with `only`',
      );
    }
    byName.set(name, serverName);
    names.set(serverName, name);
  }
  return names;
}
