import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/api/auth/api-keys.js';
import { ApiHarness } from './support/harness.js';

/*
 * GET /v1/inbox/events: the counts the console's inbox shows, pushed as they change, for the key's
 * tenant only; a revoked key's stream ends.
 */

interface Counts {
  unknown: number;
  conflicts: number;
  pending_approvals: number;
  capped: boolean;
}

/** Reads `inbox` events off the stream, one at a time. */
class InboxStream {
  private buffer = '';
  private readonly reader: ReadableStreamDefaultReader<string>;
  private constructor(
    readonly response: Response,
    private readonly abort: AbortController,
  ) {
    this.reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  }

  static async open(base: string, key: string): Promise<InboxStream> {
    const abort = new AbortController();
    const response = await fetch(`${base}/v1/inbox/events`, {
      headers: { authorization: `Bearer ${key}` },
      signal: abort.signal,
    });
    expect(response.status).toBe(200);
    return new InboxStream(response, abort);
  }

  /** The next named event, within 10 s. */
  async next(): Promise<{ event: string; data: unknown }> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const end = this.buffer.indexOf('\n\n');
      if (end >= 0) {
        const block = this.buffer.slice(0, end);
        this.buffer = this.buffer.slice(end + 2);
        const event = /^event: (.*)$/m.exec(block)?.[1];
        const data = /^data: (.*)$/m.exec(block)?.[1];
        if (event !== undefined && data !== undefined) return { event, data: JSON.parse(data) as unknown };
        continue;
      }
      if (Date.now() > deadline) throw new Error('no inbox event within 10 s');
      const { value, done } = await this.reader.read();
      if (done) throw new Error('the stream ended');
      this.buffer += value;
    }
  }

  close(): void {
    this.abort.abort();
  }
}

describe.each(['sqlite', 'postgres'] as const)('GET /v1/inbox/events on %s', (dialect) => {
  let h: ApiHarness;
  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  it("sends the tenant's counts at once, then each change, and nothing of another tenant", async () => {
    const stream = await InboxStream.open(h.base, h.keys.viewer);
    expect(stream.response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const first = await stream.next();
    expect(first).toEqual({
      event: 'inbox',
      data: { unknown: 0, conflicts: 0, pending_approvals: 0, capped: false } satisfies Counts,
    });

    // A call of another tenant goes unknown: nothing for this stream. Then one of ours does.
    await h.seedCall('indeterminate', { tenantId: 'globex' });
    const ours = await h.seedCall('indeterminate');
    expect(await stream.next()).toEqual({
      event: 'inbox',
      data: { unknown: 1, conflicts: 0, pending_approvals: 0, capped: false },
    });

    // Settled through the API: the count goes back to zero on the stream.
    const resolved = await h.request('POST', `/v1/tool-executions/${ours.idempotencyKey}/resolve`, {
      key: h.keys.operator,
      body: { status: 'failed', reason: 'not in the partner portal' },
    });
    expect(resolved.status).toBe(200);
    expect(await stream.next()).toEqual({
      event: 'inbox',
      data: { unknown: 0, conflicts: 0, pending_approvals: 0, capped: false },
    });
    stream.close();
  });

  it('ends the stream of a key revoked meanwhile', async () => {
    const { key, record } = await createApiKey(h.store.apiKeys, {
      tenantId: 'acme',
      actorId: 'ops-short',
      role: 'viewer',
    });
    const stream = await InboxStream.open(h.base, key);
    expect((await stream.next()).event).toBe('inbox');
    await h.store.apiKeys.revoke('acme', record.keyId, 'ops-admin');
    expect(await stream.next()).toEqual({
      event: 'stream.closed',
      data: { reason: 'the API key was revoked' },
    });
    stream.close();
  });
});
