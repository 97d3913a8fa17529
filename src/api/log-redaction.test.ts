import { describe, expect, it } from 'vitest';
import { redactUrl } from './log-redaction.js';

const KEY = `oncely_0123456789ab_${'A'.repeat(43)}`;

describe('redactUrl', () => {
  it.each([
    ['/v1/runs?limit=5&status=failed', '/v1/runs?limit=5&status=failed'],
    ['/v1/runs', '/v1/runs'],
    [`/v1/runs?api_key=${KEY}&limit=5`, '/v1/runs?api_key=***&limit=5'],
    [
      '/v1/runs?apiKey=abc&X-Api-Key=def&token=&refresh_token=t',
      '/v1/runs?apiKey=***&X-Api-Key=***&token=***&refresh_token=***',
    ],
    ['/v1/runs?password=a&secret=b&auth=c', '/v1/runs?password=***&secret=***&auth=***'],
    [`/v1/runs?cursor=${KEY}`, '/v1/runs?cursor=***'],
    [`/v1/runs?cursor=${KEY.slice(0, 25)}`, '/v1/runs?cursor=***'],
    [`/v1/runs?${KEY}`, '/v1/runs?***'],
    [`/v1/runs?${KEY}=1`, '/v1/runs?***=***'],
    [`/v1/runs?q=${encodeURIComponent(`Bearer ${KEY}`)}`, '/v1/runs?q=***'],
    [`/v1/runs?q=${KEY.replaceAll('_', '%5F')}`, '/v1/runs?q=***'],
    [`/v1/runs/${KEY}/events?x=1`, '/v1/runs/***/events?x=1'],
    ['/v1/runs?bad=%zz', '/v1/runs?bad=%zz'],
  ])('%s is logged as %s', (url, logged) => {
    expect(redactUrl(url)).toBe(logged);
  });
});
