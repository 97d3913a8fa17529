/* eslint-disable @typescript-eslint/no-unsafe-member-access -- HTTP answers are JSON of no static type, read by assertions */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey, routesOf } from '../../src/api/index.js';
import { ENDPOINTS, seed, type Endpoint, type Seeds } from './support/endpoints.js';
import { DIALECTS, OTHER_TENANT, TENANT, ApiHarness, type RequestOptions } from './support/harness.js';

const label = (e: Endpoint): string => `${e.method} ${e.route}`;

describe.each(DIALECTS)('the auth matrix on %s', (dialect) => {
  let h: ApiHarness;
  let seeds: Seeds;
  let revokedKey: string;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
    seeds = await seed(h);
    const revoked = await createApiKey(h.store.apiKeys, { tenantId: TENANT, actorId: 'gone', role: 'admin' });
    await h.store.apiKeys.revoke(TENANT, revoked.record.keyId, 'test');
    revokedKey = revoked.key;
  });
  afterAll(async () => {
    await h.close();
  });

  const send = (e: Endpoint, options: RequestOptions) =>
    h.request(e.method, e.path(seeds), {
      ...(e.body === undefined ? {} : { body: e.body(seeds) }),
      ...(e.stream === true ? { headersOnly: true } : {}),
      ...options,
    });

  /** Sends the request and checks the answer is `status` with `code`, and that no row changed. */
  async function refused(e: Endpoint, options: RequestOptions, status: number, code: string): Promise<void> {
    const before = await h.snapshot();
    const answer = await send(e, options);
    expect(answer.status, `${label(e)}: ${answer.text}`).toBe(status);
    expect(answer.body).toEqual({ error: { code, message: expect.any(String) as string } });
    expect(await h.snapshot(), `${label(e)} changed the database`).toBe(before);
  }

  it('covers every authenticated route the server has', () => {
    const served = routesOf(h.app)
      .filter((r) => r.url.startsWith('/v1/'))
      .map((r) => `${r.method} ${r.url}`)
      .sort();
    expect(ENDPOINTS.map(label).sort()).toEqual(served);
  });

  it.each(ENDPOINTS.map((e) => [label(e), e] as const))(
    '%s without a key: 401, nothing changes',
    async (_, e) => {
      await refused(e, {}, 401, 'API_AUTH_REQUIRED');
      await refused(e, { headers: { authorization: '' } }, 401, 'API_AUTH_REQUIRED');
    },
  );

  it.each(ENDPOINTS.map((e) => [label(e), e] as const))(
    '%s with a bad key: 401, nothing changes',
    async (_, e) => {
      const forged = `oncely_000000000000_${'A'.repeat(43)}`;
      const revokedPrefix = revokedKey.slice(0, -1) + (revokedKey.endsWith('A') ? 'B' : 'A');
      for (const header of [
        `Bearer ${forged}`,
        `Bearer ${revokedPrefix}`,
        `Bearer ${revokedKey}`,
        'Bearer not-a-key',
        "Bearer ' OR 1=1 --",
        `Basic ${Buffer.from('admin:admin').toString('base64')}`,
        `Bearer ${h.keys.admin} extra`,
      ]) {
        await refused(e, { headers: { authorization: header } }, 401, 'API_KEY_INVALID');
      }
    },
  );

  it.each(ENDPOINTS.map((e) => [label(e), e] as const))(
    "%s with another tenant's key: acme's records are not there",
    async (_, e) => {
      if (e.kind === 'record') {
        const notFound = e.route.startsWith('/v1/api-keys') ? 'API_KEY_NOT_FOUND' : undefined;
        const before = await h.snapshot();
        const answer = await send(e, { key: h.keys.otherAdmin });
        expect(answer.status, answer.text).toBe(404);
        expect(answer.body.error.code).toBe(
          notFound ??
            (e.route.includes('approvals')
              ? 'APPROVAL_NOT_FOUND'
              : e.route.includes('workflow-runs')
                ? 'WORKFLOW_NOT_FOUND'
                : e.route.includes('runs')
                  ? 'RUN_NOT_FOUND'
                  : 'LEDGER_RECORD_NOT_FOUND'),
        );
        expect(await h.snapshot()).toBe(before);
        return;
      }
      const acmeBefore = await h.snapshot(TENANT);
      const answer = await send(e, { key: h.keys.otherAdmin });
      expect(answer.status, answer.text).toBeLessThan(300);
      if (e.kind === 'feed') {
        // Its own tenant's counts (what they hold: test/api/inbox-events.test.ts).
        expect(answer.headers.get('content-type')).toContain('text/event-stream');
      } else if (e.kind === 'list') {
        const tenants = (answer.body.items as { tenant_id: string }[]).map((i) => i.tenant_id);
        expect(tenants.every((t) => t === OTHER_TENANT)).toBe(true);
        expect(answer.text).not.toContain(seeds.runId);
        expect(answer.text).not.toContain(seeds.unknownKey);
      } else {
        expect((answer.body.tenant_id ?? answer.body.api_key?.tenant_id) as string).toBe(OTHER_TENANT);
      }
      expect(await h.snapshot(TENANT), "another tenant's request changed acme's rows").toBe(acmeBefore);
    },
  );

  it.each(ENDPOINTS.map((e) => [label(e), e] as const))(
    '%s with a viewer key: reads answer, anything else is 403 and changes nothing',
    async (_, e) => {
      if (e.role !== 'viewer') {
        await refused(e, { key: h.keys.viewer }, 403, 'API_FORBIDDEN');
        return;
      }
      const before = await h.snapshot();
      const answer = await send(e, { key: h.keys.viewer });
      expect(answer.status, answer.text).toBe(200);
      expect(await h.snapshot()).toBe(before);
    },
  );

  it.each(ENDPOINTS.filter((e) => e.role === 'admin').map((e) => [label(e), e] as const))(
    '%s with an operator key: 403, nothing changes',
    async (_, e) => {
      await refused(e, { key: h.keys.operator }, 403, 'API_FORBIDDEN');
    },
  );

  it.each(ENDPOINTS.filter((e) => e.kind === 'record').map((e) => [label(e), e] as const))(
    '%s with the right key does what it says (so the refusals above were the auth, not the request)',
    async (_, e) => {
      const key = e.role === 'admin' ? h.keys.admin : e.role === 'operator' ? h.keys.operator : h.keys.viewer;
      const fresh = await seed(h);
      const answer = await h.request(e.method, e.path(fresh), {
        key,
        ...(e.body === undefined ? {} : { body: e.body(fresh) }),
        ...(e.stream === true ? { headersOnly: true } : {}),
      });
      expect(answer.status, answer.text).toBe(e.ok ?? 200);
    },
  );
});
