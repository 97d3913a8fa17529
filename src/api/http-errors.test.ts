import { describe, expect, it } from 'vitest';
import { ERROR_CODES, OncelyError } from '../errors/index.js';
import { HTTP_STATUS, errorResponse } from './http-errors.js';

describe('the HTTP error table', () => {
  it('gives every error code a 4xx or 5xx status', () => {
    for (const code of ERROR_CODES) {
      expect(HTTP_STATUS[code], code).toBeGreaterThanOrEqual(400);
      expect(HTTP_STATUS[code], code).toBeLessThan(600);
    }
    expect(Object.keys(HTTP_STATUS).sort()).toEqual([...ERROR_CODES].sort());
  });

  it('answers an oncely error with its code, message and status', () => {
    const error = new OncelyError('RUN_NOT_FOUND', 'no run run_1 in this tenant');
    expect(errorResponse(error)).toEqual({
      status: 404,
      body: { error: { code: 'RUN_NOT_FOUND', message: 'no run run_1 in this tenant' } },
    });
  });

  it('maps framework errors by their status: 413, 415, other 4xx as API_REQUEST_INVALID', () => {
    const framework = (statusCode: number, message: string) =>
      Object.assign(new Error(message), { statusCode });
    expect(errorResponse(framework(413, 'Request body is too large')).body.error.code).toBe(
      'API_REQUEST_TOO_LARGE',
    );
    expect(errorResponse(framework(415, 'Unsupported Media Type')).status).toBe(415);
    expect(errorResponse(framework(400, 'Body is not valid JSON'))).toMatchObject({
      status: 400,
      body: { error: { code: 'API_REQUEST_INVALID' } },
    });
  });

  it('never shows an unexpected error to the client: 500 API_INTERNAL without its text', () => {
    const answer = errorResponse(new Error('password=hunter2 at db.internal:5432'));
    expect(answer.status).toBe(500);
    expect(answer.body.error.code).toBe('API_INTERNAL');
    expect(JSON.stringify(answer.body)).not.toContain('hunter2');
    expect(errorResponse(Object.assign(new Error('boom'), { statusCode: 502 })).status).toBe(500);
  });
});
