import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isTool, type Tool } from '../tools/index.js';

/** How long importing a tools module may take before it is refused; `ONCELY_TOOLS_IMPORT_TIMEOUT_MS`. */
export const DEFAULT_TOOLS_IMPORT_TIMEOUT_MS = 30_000;

/** The packages every tools module imports; it must find them from its own folder. */
const OWN_PACKAGES = ['oncely', 'zod'];

export type ToolsModuleResult =
  | { readonly ok: true; readonly tools: Map<string, Tool> }
  | { readonly ok: false; readonly reason: string; readonly cause?: unknown };

export interface LoadToolsOptions {
  /** How long the import may take (a top-level await that never settles); default 30 s. */
  readonly timeoutMs?: number;
}

/**
 * Imports a tools module and registers every tool it exports by name: named exports, and arrays or
 * plain objects of tools (e.g. `export default [issueCredit, lookupOrder]`). An import that does not
 * settle within `timeoutMs`, throws, or cannot find a package is refused with one line saying what to do.
 */
export async function loadToolsModule(
  file: string,
  options: LoadToolsOptions = {},
): Promise<ToolsModuleResult> {
  if (!existsSync(file)) {
    return {
      ok: false,
      reason: `cannot import the tools module ${file}: it does not exist; fix \`tools:\` (a path relative to the configuration file)`,
    };
  }
  const timeoutMs = options.timeoutMs ?? DEFAULT_TOOLS_IMPORT_TIMEOUT_MS;
  let exported: Record<string, unknown>;
  try {
    const imported = await withinTime<unknown>(import(pathToFileURL(file).href), timeoutMs);
    if (imported === TIMED_OUT) {
      return {
        ok: false,
        reason:
          `cannot import the tools module ${file}: it did not finish importing within ${timeoutMs} ms ` +
          '(a top-level await that never settles?); make its top-level code finish (connect lazily, inside the tools), ' +
          'or raise ONCELY_TOOLS_IMPORT_TIMEOUT_MS',
      };
    }
    exported = imported as Record<string, unknown>;
  } catch (cause) {
    return { ok: false, reason: importFailure(file, cause), cause };
  }
  return toolsOf(file, exported);
}

function toolsOf(file: string, exported: Record<string, unknown>): ToolsModuleResult {
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

const TIMED_OUT = Symbol('timed out');

/** The promise's value, or `TIMED_OUT`; the timer keeps the process alive while the import is awaited. */
async function withinTime<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(() => resolve(TIMED_OUT), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** One line: a package the module cannot find (and where to install it), or what it threw. */
function importFailure(file: string, cause: unknown): string {
  const message = cause instanceof Error ? cause.message : String(cause);
  const missing = /^Cannot find package '([^']+)' imported from (.+)$/m.exec(message);
  if ((cause as { code?: unknown } | null)?.code === 'ERR_MODULE_NOT_FOUND' && missing !== null) {
    const name = packageName(missing[1] ?? '');
    const where = dirname(file);
    if (OWN_PACKAGES.includes(name)) {
      return (
        `cannot import the tools module ${file}: it cannot find the package "${name}"; a tools module imports oncely and ` +
        `zod from its own folder, so install them there: \`cd ${where} && npm install oncely zod\` ` +
        '(or put the module inside a project that depends on both)'
      );
    }
    return (
      `cannot import the tools module ${file}: it cannot find the package "${name}" (imported from ${missing[2] ?? file}); ` +
      `install it where the module lives: \`cd ${where} && npm install ${name}\``
    );
  }
  const name = cause instanceof Error && cause.name !== 'Error' ? `${cause.name}: ` : '';
  return (
    `cannot import the tools module ${file}: it threw: ${name}${oneLine(message)}; fix the module ` +
    `(\`node ${file}\` shows where)`
  );
}

/** A message on one line, at most 500 characters (a ZodError's is pretty-printed JSON). */
function oneLine(message: string): string {
  const line = message.replace(/\s+/g, ' ').trim();
  return line.length > 500 ? `${line.slice(0, 499)}…` : line;
}

/** `@scope/pkg/sub` → `@scope/pkg`; `zod/v4` → `zod`. */
function packageName(specifier: string): string {
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] ?? specifier);
}

function toolsIn(value: unknown): Tool[] {
  if (isTool(value)) return [value];
  if (Array.isArray(value)) return value.filter(isTool);
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.values(value).filter(isTool);
  }
  return [];
}
