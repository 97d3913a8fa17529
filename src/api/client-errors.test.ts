import { describe, expect, it } from 'vitest';
import { rawErrorAnswer } from './client-errors.js';

function parse(bytes: string) {
  const [head = '', body = ''] = bytes.split('\r\n\r\n');
  const [status = '', ...lines] = head.split('\r\n');
  const headers = Object.fromEntries(
    lines.map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 2)]),
  );
  return { status, headers, body: JSON.parse(body) as { error: { code: string; message: string } } };
}

const parserError = (code: string): NodeJS.ErrnoException => Object.assign(new Error(code), { code });

describe('rawErrorAnswer', () => {
  it.each([
    ['HPE_HEADER_OVERFLOW', 'HTTP/1.1 431 Request Header Fields Too Large', 'API_HEADERS_TOO_LARGE'],
    ['ERR_HTTP_REQUEST_TIMEOUT', 'HTTP/1.1 408 Request Timeout', 'API_REQUEST_TIMEOUT'],
    ['HPE_CHUNK_EXTENSIONS_OVERFLOW', 'HTTP/1.1 413 Payload Too Large', 'API_REQUEST_TOO_LARGE'],
    ['HPE_INVALID_METHOD', 'HTTP/1.1 400 Bad Request', 'API_REQUEST_INVALID'],
    ['ESOMETHING', 'HTTP/1.1 400 Bad Request', 'API_REQUEST_INVALID'],
  ])('answers %s as %s in the envelope', (code, statusLine, errorCode) => {
    const answer = rawErrorAnswer(parserError(code));
    expect(answer.code).toBe(errorCode);
    const { status, headers, body } = parse(answer.bytes);
    expect(status).toBe(statusLine);
    expect(headers).toMatchObject({
      'content-type': 'application/json; charset=utf-8',
      'x-content-type-options': 'nosniff',
      'cache-control': 'no-store',
      connection: 'close',
    });
    expect(Number(headers['content-length'])).toBe(Buffer.byteLength(answer.bytes.split('\r\n\r\n')[1]!));
    expect(body.error.code).toBe(errorCode);
  });

  it('names a parser error code, never other text of the error', () => {
    const error = Object.assign(new Error('Parse Error: oncely_0123456789ab_secret'), {
      code: 'HPE_INVALID_HEADER_TOKEN',
    });
    const { body } = parse(rawErrorAnswer(error).bytes);
    expect(body.error.message).toContain('HPE_INVALID_HEADER_TOKEN');
    expect(body.error.message).not.toContain('oncely_');
  });
});
