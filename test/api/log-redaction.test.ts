import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiHarness } from './support/harness.js';

/** The URLs the server logged for its requests ("incoming request" lines). */
function loggedUrls(h: ApiHarness): string[] {
  return h.logLines
    .map((line) => (line.req as { url?: unknown } | undefined)?.url)
    .filter((url): url is string => typeof url === 'string');
}

/*
 * A key put in a URL (by a careless script or a hostile client) is not written to the request log:
 * secret-looking query parameters and anything shaped like a key become `***`.
 */
describe('secrets in URLs are redacted in the request log', () => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start('sqlite');
  });
  afterAll(() => h.close());

  it('redacts a real key in ?api_key=, ?key= and ?token=, and keeps the other parameters', async () => {
    for (const name of ['api_key', 'key', 'token']) {
      const answer = await h.request('GET', `/v1/tool-executions?${name}=${h.keys.admin}&limit=5`);
      expect(answer.status).toBe(401);
    }
    const logged = JSON.stringify(h.logLines);
    expect(logged).not.toContain(h.keys.admin);
    const urls = loggedUrls(h);
    expect(urls).toContain('/v1/tool-executions?api_key=***&limit=5');
    expect(urls).toContain('/v1/tool-executions?key=***&limit=5');
    expect(urls).toContain('/v1/tool-executions?token=***&limit=5');
  });

  it('redacts a secret-named parameter whatever its value, and a key under any name or in the path', async () => {
    const key = h.keys.viewer;
    // The random part after `oncely_<12 hex>_` (it may itself hold `_`, so not a split on `_`).
    const secretPart = key.slice('oncely_'.length + 13);
    expect(secretPart).toHaveLength(43);
    await h.request('GET', '/v1/runs?access_token=hunter2&password=p4ss&status=failed', { key });
    await h.request('GET', `/v1/runs?cursor=${key}`, { key });
    await h.request('GET', `/v1/runs?q=${encodeURIComponent(`Bearer ${key}`)}`, { key });
    await h.request('GET', `/v1/runs?cursor=${key.replaceAll('_', '%5F')}`, { key });
    await h.request('GET', `/v1/runs/${key}`, { key });
    await h.request('GET', `/v1/nothing/${key}/here`);
    const logged = JSON.stringify(h.logLines);
    for (const secret of [key, secretPart, 'hunter2', 'p4ss']) expect(logged).not.toContain(secret);
    const urls = loggedUrls(h);
    expect(urls).toContain('/v1/runs?access_token=***&password=***&status=failed');
    expect(urls).toContain('/v1/runs?cursor=***');
    expect(urls).toContain('/v1/runs?q=***');
    expect(urls).toContain('/v1/runs/***');
    expect(urls).toContain('/v1/nothing/***/here');
  });

  it('leaves a URL without secrets as it was', async () => {
    await h.request('GET', '/v1/tool-executions?status=indeterminate&limit=2', { key: h.keys.viewer });
    expect(loggedUrls(h)).toContain('/v1/tool-executions?status=indeterminate&limit=2');
  });
});
