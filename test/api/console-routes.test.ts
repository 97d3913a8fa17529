import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONSOLE_CSP } from '../../src/api/routes/console.js';
import { ApiHarness } from './support/harness.js';

/*
 * The console's page and assets as the server serves them (the pages themselves are tested in
 * Chromium, test/console): from the build, with the strict policy, nothing else.
 */
describe('the console routes', () => {
  let h: ApiHarness;
  beforeAll(async () => {
    h = await ApiHarness.start('sqlite');
  });
  afterAll(async () => {
    await h.close();
  });

  it('serves the page and its assets under a strict Content-Security-Policy, and sends / there', async () => {
    const page = await h.app.inject({ method: 'GET', url: '/console' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(page.headers['content-security-policy']).toBe(CONSOLE_CSP);
    expect(CONSOLE_CSP).toContain("script-src 'self'");
    expect(CONSOLE_CSP).not.toContain('unsafe');
    expect(page.headers['x-frame-options']).toBe('DENY');
    // No inline script: everything the page runs comes from /console/assets.
    expect(page.body).not.toMatch(/<script>|<script [^>]*>[^<]+<\/script>/);
    const scripts = [...page.body.matchAll(/src="([^"]+)"/g)].map((m) => m[1]);
    expect(scripts).toEqual(['/console/assets/main.js']);

    for (const [asset, type] of [
      ['main.js', 'text/javascript; charset=utf-8'],
      ['call.js', 'text/javascript; charset=utf-8'],
      ['favicon.svg', 'image/svg+xml'],
      ['style.css', 'text/css; charset=utf-8'],
    ] as const) {
      const answer = await h.app.inject({ method: 'GET', url: `/console/assets/${asset}` });
      expect(answer.statusCode, asset).toBe(200);
      expect(answer.headers['content-type']).toBe(type);
      expect(answer.headers['content-security-policy']).toBe(CONSOLE_CSP);
    }
    const root = await h.app.inject({ method: 'GET', url: '/' });
    expect([root.statusCode, root.headers.location]).toEqual([302, '/console']);
  });

  it('answers 404 in the error envelope for anything that is not an asset', async () => {
    for (const url of [
      '/console/assets/nope.js',
      '/console/assets/..%2F..%2Fpackage.json',
      '/console/assets/assets.json',
    ]) {
      const answer = await h.app.inject({ method: 'GET', url });
      expect(answer.statusCode, url).toBe(404);
      expect(answer.json<{ error: { code: string } }>().error.code).toBe('API_ROUTE_NOT_FOUND');
    }
  });
});
