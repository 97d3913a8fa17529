/* eslint-disable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-call -- HTTP answers are JSON of no static type, read by assertions */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DIALECTS, OTHER_TENANT, TENANT, ApiHarness } from './support/harness.js';

describe.each(DIALECTS)('API keys over HTTP on %s', (dialect) => {
  let h: ApiHarness;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
  });
  afterAll(async () => {
    await h.close();
  });

  it('an admin creates a key: shown once, stored as its hash, scoped to the tenant, with its role and actor', async () => {
    const created = await h.request('POST', '/v1/api-keys', {
      key: h.keys.admin,
      body: { actor_id: 'ops-bea', role: 'viewer' },
    });
    expect(created.status).toBe(201);
    const key = created.body.key as string;
    expect(key).toMatch(/^oncely_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$/);
    expect(created.body.api_key).toMatchObject({
      tenant_id: TENANT,
      actor_id: 'ops-bea',
      role: 'viewer',
      created_by: 'ops-admin',
    });
    const snapshot = await h.snapshot();
    expect(snapshot).not.toContain(key);
    expect(snapshot).toContain(createHash('sha256').update(key).digest('hex'));

    const listed = await h.request('GET', '/v1/api-keys', { key: h.keys.admin });
    expect(listed.status).toBe(200);
    expect(listed.body.items.every((k: { tenant_id: string }) => k.tenant_id === TENANT)).toBe(true);
    expect(listed.body.items.map((k: { key_id: string }) => k.key_id)).toContain(created.body.api_key.key_id);
    expect(listed.text).not.toContain(key);
    expect(listed.text).not.toMatch(/key_hash|[0-9a-f]{64}/);

    expect((await h.request('GET', '/v1/tool-executions', { key })).status).toBe(200);
    const refused = await h.request('POST', '/v1/runs', { key, body: { agent: 'credit-agent', input: 'x' } });
    expect(refused.status).toBe(403);
    const otherTenant = await h.request('GET', '/v1/api-keys', { key: h.keys.otherAdmin });
    expect(otherTenant.text).not.toContain(created.body.api_key.key_id);
    expect(otherTenant.body.items.every((k: { tenant_id: string }) => k.tenant_id === OTHER_TENANT)).toBe(
      true,
    );
  });

  it('records who minted a key, apart from the actor it acts as, in every answer about it', async () => {
    const minted = await h.request('POST', '/v1/api-keys', {
      key: h.keys.admin,
      body: { actor_id: 'ops-erin', role: 'admin' },
    });
    expect(minted.status).toBe(201);
    expect(minted.body.api_key).toMatchObject({ actor_id: 'ops-erin', created_by: 'ops-admin' });
    // A key minted with that key names its actor, not the admin who minted the first one.
    const second = await h.request('POST', '/v1/api-keys', {
      key: minted.body.key as string,
      body: { actor_id: 'ops-frank', role: 'viewer' },
    });
    expect(second.body.api_key).toMatchObject({ actor_id: 'ops-frank', created_by: 'ops-erin' });

    const mintedId = minted.body.api_key.key_id as string;
    const secondId = second.body.api_key.key_id as string;
    const listed = await h.request('GET', '/v1/api-keys?limit=100', { key: h.keys.admin });
    const items = listed.body.items as { key_id: string; actor_id: string; created_by: string | null }[];
    const byId = new Map(items.map((k) => [k.key_id, k]));
    expect(byId.get(mintedId)).toMatchObject({
      actor_id: 'ops-erin',
      created_by: 'ops-admin',
    });
    expect(byId.get(secondId)).toMatchObject({
      actor_id: 'ops-frank',
      created_by: 'ops-erin',
    });
    expect(items.find((k) => k.actor_id === 'ops-admin')?.created_by).toBe(null);

    const revoked = await h.request('POST', `/v1/api-keys/${secondId}/revoke`, {
      key: h.keys.admin,
    });
    expect(revoked.body).toMatchObject({
      actor_id: 'ops-frank',
      created_by: 'ops-erin',
      revoked_by: 'ops-admin',
    });
    expect(await h.store.apiKeys.get(TENANT, secondId)).toMatchObject({
      actorId: 'ops-frank',
      createdBy: 'ops-erin',
    });

    const logged = h.logLines.find((l) => l.msg === 'api key created' && l.keyId === secondId);
    expect(logged).toMatchObject({ actorId: 'ops-erin', for: 'ops-frank', createdBy: 'ops-erin' });
  });

  it("the key's actor id is what the ledger records as the operator", async () => {
    const created = await h.request('POST', '/v1/api-keys', {
      key: h.keys.admin,
      body: { actor_id: 'ops-carla', role: 'operator' },
    });
    const record = await h.seedCall('indeterminate');
    const answer = await h.request('POST', `/v1/tool-executions/${record.idempotencyKey}/resolve`, {
      key: created.body.key as string,
      body: { status: 'completed', reason: 'receipt found' },
    });
    expect(answer.status).toBe(200);
    const history = await h.store.ledger.history(TENANT, record.idempotencyKey);
    expect(history.at(-1)?.actor).toEqual({ kind: 'operator', id: 'ops-carla' });
  });

  it('a revoked key answers 401 from then on; revoking it again is 404', async () => {
    const created = await h.request('POST', '/v1/api-keys', {
      key: h.keys.admin,
      body: { actor_id: 'ops-dan', role: 'operator' },
    });
    const key = created.body.key as string;
    const keyId = created.body.api_key.key_id as string;
    expect((await h.request('GET', '/v1/runs', { key })).status).toBe(200);
    const revoked = await h.request('POST', `/v1/api-keys/${keyId}/revoke`, { key: h.keys.admin });
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ key_id: keyId, revoked_by: 'ops-admin' });
    expect(revoked.body.revoked_at).toEqual(expect.any(String));
    const after = await h.request('GET', '/v1/runs', { key });
    expect(after.status).toBe(401);
    expect(after.body.error.code).toBe('API_KEY_INVALID');
    const again = await h.request('POST', `/v1/api-keys/${keyId}/revoke`, { key: h.keys.admin });
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe('API_KEY_NOT_FOUND');
  });
});
