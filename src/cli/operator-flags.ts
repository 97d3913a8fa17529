import type { Command } from 'commander';
import { DEFAULT_API_URL } from '../api/client.js';
import { OncelyError } from '../errors/index.js';

/** A flag that carries JSON, parsed, or an error saying what is wrong with it. */
export function parseJsonFlag(name: string, text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new OncelyError(
      'API_REQUEST_INVALID',
      `${name} must be JSON, e.g. '{"receipt":"r_123"}' or '"a string"'; nothing was sent`,
    );
  }
}

/** The line after a full page: how to ask for the next one. */
export function moreHint(command: string, page: { next_cursor: string | null }): string {
  return page.next_cursor === null ? '' : `\nmore: oncely ${command} --cursor ${page.next_cursor}\n`;
}

/** Adds the flags every operator command shares: where the API is, the key, and `--json`. */
export function withApiFlags(command: Command): Command {
  return command
    .option('--api-url <url>', `the oncely API (default: $ONCELY_API_URL, else ${DEFAULT_API_URL})`)
    .option('--api-key <key>', 'an API key (default: $ONCELY_API_KEY)')
    .option('--json', 'print the answer as JSON, for scripts');
}
