import { OncelyError } from '../errors/index.js';

export interface OptionalPackage {
  /** The package's name, as `import()` takes it: `@ai-sdk/openai`, `ioredis`. */
  readonly name: string;
  /** What needs it, for the message: `the openai model "gpt-5"`, `a PostgreSQL ledger`. */
  readonly neededBy: string;
  /** What to install when the bare name is not enough: `@ai-sdk/openai@3`, `ioredis@5`. */
  readonly install?: string;
}

/**
 * Loads a package oncely declares as an optional peer dependency, when it is first needed. When the
 * package is not installed, a `PACKAGE_MISSING` error names what needs it and the command that
 * installs it; any other failure (an installed package that throws as it loads) is passed on as is.
 *
 * @example
 * const { Redis } = await loadOptional({ name: 'ioredis', neededBy: 'Redis wake-ups', install: 'ioredis@5' },
 *   () => import('ioredis'));
 */
export async function loadOptional<T>(pkg: OptionalPackage, load: () => Promise<T>): Promise<T> {
  try {
    return await load();
  } catch (cause) {
    if (!isMissing(cause, pkg.name)) throw cause;
    const install = `npm install ${pkg.install ?? pkg.name}`;
    throw new OncelyError(
      'PACKAGE_MISSING',
      `${pkg.neededBy} needs the package ${pkg.name}, which is not installed: install it with \`${install}\``,
      { cause, details: { package: pkg.name, install } },
    );
  }
}

/** Node's "Cannot find package 'x'" (ES modules) or "Cannot find module 'x'" (CommonJS), for this package itself. */
function isMissing(error: unknown, name: string): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return false;
  return error.message.includes(`'${name}'`) || error.message.includes(`'${name}/`);
}
