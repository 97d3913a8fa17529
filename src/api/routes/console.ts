import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { OncelyError } from '../../errors/index.js';
import type { ApiApp } from '../context.js';

/*
 * The operator console: a page and its assets, built with the package (console/ compiled to
 * dist/console/) and served from memory. Nothing is fetched from elsewhere at run time. The page
 * holds no secret: the operator signs in with an API key kept in the tab's sessionStorage and sent
 * in the Authorization header of each API request, so a forged cross-site request (which cannot set
 * that header) is refused like any request without a key.
 */

/** What the console's pages may do: their own scripts, styles and API calls, nothing else. */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/** The built assets: beside the compiled server (dist/console), or dist/ when run from source. */
function assetDir(): string | undefined {
  for (const relative of ['../../console/', '../../../dist/console/']) {
    const dir = fileURLToPath(new URL(relative, import.meta.url));
    if (existsSync(`${dir}index.html`)) return dir;
  }
  return undefined;
}

function loadAssets(): Map<string, { body: Buffer; type: string }> | undefined {
  const dir = assetDir();
  if (dir === undefined) return undefined;
  const manifest = JSON.parse(readFileSync(`${dir}assets.json`, 'utf8')) as string[];
  const assets = new Map<string, { body: Buffer; type: string }>();
  for (const name of manifest) {
    const ext = name.slice(name.lastIndexOf('.'));
    assets.set(name, { body: readFileSync(`${dir}${name}`), type: TYPES[ext] ?? 'application/octet-stream' });
  }
  return assets;
}

export function consoleRoutes(app: ApiApp): void {
  const assets = loadAssets();
  const send = (name: string) => {
    const asset = assets?.get(name);
    if (asset === undefined) {
      throw new OncelyError(
        'API_ROUTE_NOT_FOUND',
        assets === undefined
          ? "the console's assets are not built into this package (npm run build makes them)"
          : `no console asset ${name}`,
      );
    }
    return asset;
  };
  const hide = { schema: { hide: true } };
  app.get('/', hide, (_request, reply) => reply.redirect('/console', 302));
  app.get('/console', hide, (_request, reply) => {
    const page = send('index.html');
    return reply.header('content-security-policy', CONSOLE_CSP).type(page.type).send(page.body);
  });
  app.get('/console/assets/:name', hide, (request, reply) => {
    const { name } = request.params as { name: string };
    const asset = send(name);
    return reply.header('content-security-policy', CONSOLE_CSP).type(asset.type).send(asset.body);
  });
}
