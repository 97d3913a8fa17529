import { pathToFileURL } from 'node:url';
import { isTool, type Tool } from '../tools/index.js';

export type ToolsModuleResult =
  | { readonly ok: true; readonly tools: Map<string, Tool> }
  | { readonly ok: false; readonly reason: string; readonly cause?: unknown };

/**
 * Imports a tools module and registers every tool it exports by name: named exports, and arrays or
 * plain objects of tools (e.g. `export default [issueCredit, lookupOrder]`).
 */
export async function loadToolsModule(file: string): Promise<ToolsModuleResult> {
  let exported: Record<string, unknown>;
  try {
    exported = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  } catch (cause) {
    const message = cause instanceof Error ? cause.message : String(cause);
    return { ok: false, reason: `cannot import the tools module ${file}: ${message}`, cause };
  }
  const tools = new Map<string, Tool>();
  for (const value of Object.values(exported)) {
    for (const candidate of toolsIn(value)) {
      const known = tools.get(candidate.name);
      if (known !== undefined && known !== candidate) {
        return {
          ok: false,
          reason: `the tools module ${file} exports two different tools named "${candidate.name}"`,
        };
      }
      tools.set(candidate.name, candidate);
    }
  }
  if (tools.size === 0) {
    return {
      ok: false,
      reason: `the tools module ${file} exports no tools; export the tools made by defineTool({ ... })`,
    };
  }
  return { ok: true, tools };
}

function toolsIn(value: unknown): Tool[] {
  if (isTool(value)) return [value];
  if (Array.isArray(value)) return value.filter(isTool);
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.values(value).filter(isTool);
  }
  return [];
}
