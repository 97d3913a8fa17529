import { ERROR_CODES, OncelyError, type ErrorCode } from '../errors/index.js';

export const DEFAULT_API_URL = 'http://127.0.0.1:8080';

export interface ApiFlags {
  apiUrl?: string;
  apiKey?: string;
  json?: boolean;
}

/**
 * A client of the operator HTTP API (the CLI's, the demo's): bearer auth, JSON in and out, and errors that say what to do. An
 * error answer of the API becomes an `OncelyError` with the server's code and message.
 *
 * @example
 * const api = ApiClient.fromFlags({});  // ONCELY_API_URL, ONCELY_API_KEY
 * const page = await api.get('/v1/tool-executions', { status: 'unknown' });
 */
export class ApiClient {
  constructor(
    readonly baseUrl: string,
    private readonly key: string,
  ) {}

  static fromFlags(flags: ApiFlags, env: NodeJS.ProcessEnv = process.env): ApiClient {
    const url = flags.apiUrl ?? nonEmpty(env.ONCELY_API_URL) ?? DEFAULT_API_URL;
    const key = flags.apiKey ?? nonEmpty(env.ONCELY_API_KEY);
    if (key === undefined) {
      throw new OncelyError(
        'API_KEY_MISSING',
        'no API key: set ONCELY_API_KEY (or pass --api-key); an admin creates one with ' +
          '`oncely keys create --tenant TENANT --actor YOUR_ID --role operator`',
      );
    }
    if (!/^https?:\/\/[^\s]+$/.test(url)) {
      throw new OncelyError(
        'API_UNREACHABLE',
        `ONCELY_API_URL / --api-url ${JSON.stringify(url)} is not an http(s) URL, e.g. ${DEFAULT_API_URL}`,
      );
    }
    return new ApiClient(url.replace(/\/+$/, ''), key);
  }

  get<T>(path: string, query: Record<string, string | number | undefined> = {}): Promise<T> {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query))
      if (value !== undefined) params.set(name, String(value));
    const search = params.size > 0 ? `?${params.toString()}` : '';
    return this.send<T>('GET', `${path}${search}`);
  }

  post<T>(path: string, body: unknown): Promise<T> {
    return this.send<T>('POST', path, body);
  }

  private async send<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = {
      authorization: `Bearer ${this.key}`,
      accept: 'application/json',
    };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let response: Response;
    try {
      response = await fetch(`${this.baseUrl}${path}`, {
        method,
        headers,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch (cause) {
      throw new OncelyError(
        'API_UNREACHABLE',
        `cannot reach the oncely API at ${this.baseUrl} (${describe(cause)}); is \`oncely serve\` running ` +
          'there? Set ONCELY_API_URL or --api-url to where it is',
        { cause },
      );
    }
    const text = await response.text();
    const parsed = parseJson(text);
    if (response.ok && parsed !== undefined) return parsed as T;
    throw answerError(this.baseUrl, response.status, parsed, text);
  }
}

/** The API's error envelope as an `OncelyError` the CLI prints with its code and what to do. */
function answerError(baseUrl: string, status: number, parsed: unknown, text: string): OncelyError {
  const error = (parsed as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  if (typeof error?.code === 'string' && typeof error.message === 'string') {
    const known = (ERROR_CODES as readonly string[]).includes(error.code);
    const hint =
      status === 401 ? '; check ONCELY_API_KEY (or --api-key): the key may be mistyped or revoked' : '';
    return new OncelyError(
      known ? (error.code as ErrorCode) : 'API_RESPONSE_INVALID',
      known ? `${error.message}${hint}` : `${error.code}: ${error.message}`,
      { details: { status, body: parsed } },
    );
  }
  return new OncelyError(
    'API_RESPONSE_INVALID',
    `${baseUrl} answered HTTP ${status} with something that is not the oncely API ` +
      `(${JSON.stringify(text.slice(0, 120))}); check ONCELY_API_URL`,
    { details: { status } },
  );
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function describe(cause: unknown): string {
  const inner = (cause as { cause?: { code?: string; message?: string } } | null)?.cause;
  return inner?.code ?? inner?.message ?? (cause instanceof Error ? cause.message : String(cause));
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value;
}
