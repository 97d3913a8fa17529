import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiHarness } from './support/harness.js';

interface RawAnswer {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/** Writes `request` as it is to the server and reads the answer until the server closes the connection. */
async function rawRequest(base: string, request: string): Promise<RawAnswer> {
  const { hostname, port } = new URL(base);
  const raw = await new Promise<string>((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) }, () => socket.end(request));
    const chunks: Buffer[] = [];
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer within 10 s')));
  });
  const [head = '', ...rest] = raw.split('\r\n\r\n');
  const [statusLine = '', ...headerLines] = head.split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const body = rest.join('\r\n\r\n');
  expect(Buffer.byteLength(body, 'utf8')).toBe(Number(headers['content-length']));
  return { status: Number(statusLine.split(' ')[1]), headers, body };
}

function expectEnvelope(answer: RawAnswer, status: number, code: string): void {
  expect(answer.status, answer.body).toBe(status);
  expect(answer.headers['content-type']).toBe('application/json; charset=utf-8');
  expect(answer.headers['x-content-type-options']).toBe('nosniff');
  expect(answer.headers['cache-control']).toBe('no-store');
  const body = JSON.parse(answer.body) as { error: { code: string; message: string } };
  expect(Object.keys(body)).toEqual(['error']);
  expect(body.error.code).toBe(code);
  expect(body.error.message).toEqual(expect.any(String));
}

/*
 * Requests Node's HTTP parser refuses before fastify sees them (header fields too large, bytes that
 * are not HTTP) still answer in the API's envelope, with the headers every other answer carries.
 */
describe('answers to requests the HTTP parser refuses', () => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start('sqlite');
  });
  afterAll(() => h.close());

  it('answers header fields too large 431 API_HEADERS_TOO_LARGE in the envelope', async () => {
    const huge = 'x'.repeat(64 * 1024);
    const answer = await rawRequest(
      h.base,
      `GET /v1/tool-executions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ${huge}\r\n\r\n`,
    );
    expectEnvelope(answer, 431, 'API_HEADERS_TOO_LARGE');
    expect(answer.headers.connection).toBe('close');

    // fetch sees the same answer.
    const fetched = await fetch(`${h.base}/v1/tool-executions`, { headers: { 'x-filler': huge } });
    expect(fetched.status).toBe(431);
    expect(fetched.headers.get('x-content-type-options')).toBe('nosniff');
    expect(((await fetched.json()) as { error: { code: string } }).error.code).toBe('API_HEADERS_TOO_LARGE');
  });

  it('answers bytes that are not an HTTP request 400 API_REQUEST_INVALID in the envelope', async () => {
    const badHeader = await rawRequest(
      h.base,
      'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nthis is no header\r\n\r\n',
    );
    expectEnvelope(badHeader, 400, 'API_REQUEST_INVALID');
    const badMethod = await rawRequest(h.base, 'G@T /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    expectEnvelope(badMethod, 400, 'API_REQUEST_INVALID');
  });

  it('never logs the refused request’s bytes (they may hold a key)', async () => {
    const secret = `oncely_0123456789ab_${'S'.repeat(43)}`;
    const answer = await rawRequest(
      h.base,
      `GET /v1/runs HTTP/1.1\r\nAuthorization: Bearer ${secret}\r\nX-Filler: ${'y'.repeat(64 * 1024)}\r\n\r\n`,
    );
    expect(answer.status).toBe(431);
    const logged = JSON.stringify(h.logLines);
    expect(logged).toContain('API_HEADERS_TOO_LARGE');
    expect(logged).not.toContain(secret);
  });

  it('still answers well-formed requests after refusing malformed ones', async () => {
    const answer = await h.request('GET', '/healthz');
    expect(answer.status).toBe(200);
  });
});
