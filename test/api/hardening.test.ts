import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApiServer } from '../../src/api/index.js';
import { OncelyProcess } from '../support/processes.js';
import { DIALECTS, ApiHarness } from './support/harness.js';

async function oncely(args: readonly string[], env: Record<string, string>) {
  const child = new OncelyProcess(args, env);
  const exit = await child.exit(20_000);
  return { code: exit.code, stdout: child.stdout, stderr: child.stderr };
}

/*
 * Small things a hostile client or a careless terminal would find: answers carry headers that stop
 * sniffing and caching, a body that is not JSON is 415 whatever its type, and text an operator or a
 * client wrote is never obeyed by the terminal that prints it.
 */

describe.each(DIALECTS)('API hardening on %s', (dialect) => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(() => h.close());

  it('sends nosniff and no-store on answers, errors included', async () => {
    for (const answer of [
      await h.request('GET', '/v1/tool-executions', { key: h.keys.viewer }),
      await h.request('GET', '/v1/tool-executions'),
      await h.request('GET', '/healthz'),
    ]) {
      expect(answer.headers.get('x-content-type-options')).toBe('nosniff');
      expect(answer.headers.get('cache-control')).toBe('no-store');
    }
  });

  it('answers a text/plain body 415 in the envelope, and changes nothing', async () => {
    const call = await h.seedCall('indeterminate');
    const before = await h.snapshot();
    const answer = await h.request('POST', `/v1/tool-executions/${call.idempotencyKey}/resolve`, {
      key: h.keys.operator,
      headers: { 'content-type': 'text/plain' },
      rawBody: 'status=failed',
    });
    expect(answer.status).toBe(415);
    expect((answer.body as { error: { code: string } }).error.code).toBe('API_MEDIA_TYPE_UNSUPPORTED');
    expect(await h.snapshot()).toBe(before);
  });

  it('prints an operator’s reason with its escape sequences shown, not obeyed', async () => {
    const call = await h.seedCall('indeterminate');
    const reason = 'checked \u001b[2J\u001b[1;31mALL CLEAR\u001b[0m\rnothing to see';
    const resolved = await h.request('POST', `/v1/tool-executions/${call.idempotencyKey}/resolve`, {
      key: h.keys.operator,
      body: { status: 'failed', reason },
    });
    expect(resolved.status).toBe(200);
    const env = { ONCELY_API_URL: h.base, ONCELY_API_KEY: h.keys.viewer };
    const shown = await oncely(['executions', 'show', call.idempotencyKey], env);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout.includes('\u001b') || shown.stdout.includes('\r')).toBe(false);
    expect(shown.stdout).toContain('\\u001b[2J');
  });
});

describe('API connection limit', () => {
  it('answers one connection past the limit 429 in the envelope and closes it; the held ones still work', async () => {
    const h = await ApiHarness.start('sqlite');
    const limited = await buildApiServer({ runtime: h.runtime, maxConnections: 3 });
    const base = new URL(await limited.listen({ host: '127.0.0.1', port: 0 }));
    const held: Socket[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const socket = connect(Number(base.port), base.hostname);
        await once(socket, 'connect');
        held.push(socket);
      }
      const extra = connect(Number(base.port), base.hostname);
      let answer = '';
      extra.on('data', (chunk: Buffer) => (answer += chunk.toString('utf8')));
      extra.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n');
      await once(extra, 'close');
      expect(answer).toMatch(/^HTTP\/1\.1 429 /);
      expect(answer).toMatch(/\r\nretry-after: 5\r\n/);
      const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as {
        error: { code: string; message: string };
      };
      expect(body.error.code).toBe('API_TOO_MANY_CONNECTIONS');
      expect(body.error.message).toMatch(/holds 3 connections/);

      // A held connection is served; once one closes, a new one is let in.
      let served = '';
      held[0]!.on('data', (chunk: Buffer) => (served += chunk.toString('utf8')));
      held[0]!.write('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      await once(held[0]!, 'close');
      expect(served).toMatch(/^HTTP\/1\.1 200 /);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect((await fetch(new URL('/healthz', base))).status).toBe(200);
    } finally {
      for (const socket of held) socket.destroy();
      await limited.close();
      await h.close();
    }
  });
});
