import { connect } from 'node:net';

const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

/** Sends a raw PING and resolves true on +PONG within timeoutMs. */
function ping(url: string, timeoutMs: number): Promise<boolean> {
  let host: string;
  let port: number;
  try {
    const parsed = new URL(url);
    host = parsed.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1';
    port = parsed.port ? Number(parsed.port) : 6379;
  } catch {
    return Promise.resolve(false);
  }
  return new Promise((resolve) => {
    let settled = false;
    let received = '';
    const socket = connect({ host, port });
    const finish = (ok: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('utf8');
      if (received.includes('\r\n')) finish(received.startsWith('+PONG'));
    });
    socket.once('error', () => finish(false));
    socket.once('close', () => finish(false));
  });
}

/**
 * The Redis URL for tests, or undefined (after a loud warning) when Redis is not reachable.
 * With ONCELY_REQUIRE_REDIS=1 an unreachable Redis is an error instead.
 *
 * @example
 * const redisUrl = await redisUrlOrSkip();
 * describe.skipIf(!redisUrl)('redis', () => { ... });
 */
export async function redisUrlOrSkip(): Promise<string | undefined> {
  const url = process.env.REDIS_URL || DEFAULT_REDIS_URL;
  if (await ping(url, 1000)) return url;
  if (process.env.ONCELY_REQUIRE_REDIS === '1') {
    throw new Error(`Redis is required (ONCELY_REQUIRE_REDIS=1) but did not answer PING at ${url}`);
  }
  const bar = '!'.repeat(72);
  process.stderr.write(
    [
      '',
      bar,
      `REDIS TESTS SKIPPED: no Redis answered PING at ${url}.`,
      'Start Redis or set REDIS_URL to run them; set ONCELY_REQUIRE_REDIS=1 to make this an error.',
      bar,
      '',
    ].join('\n') + '\n',
  );
  return undefined;
}
