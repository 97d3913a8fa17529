import { DEFAULT_DATABASE_URL } from '../store/index.js';

/** The database a command uses: `--database-url`, else `ONCELY_DATABASE_URL`, else the embedded file. */
export function databaseUrl(flag: string | undefined): string {
  return flag ?? process.env.ONCELY_DATABASE_URL ?? DEFAULT_DATABASE_URL;
}

/** The URL with any password masked, for output. */
export function shownUrl(url: string): string {
  return url.replace(/(\/\/[^:/@]*:)[^@]*@/, '$1***@');
}
