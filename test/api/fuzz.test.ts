/* eslint-disable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-return -- HTTP answers are JSON of no static type, read by assertions */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ENDPOINTS, seed, type Endpoint, type Seeds } from './support/endpoints.js';
import { DIALECTS, ApiHarness } from './support/harness.js';

const RUNS = 120;

/** Strings an attacker or a broken client sends: SQL, control and format characters, emoji, huge. */
const hostile = fc.constantFrom(
  "'; DROP TABLE tool_executions; --",
  '" OR 1=1 --',
  "Robert'); DELETE FROM runs; --",
  '\u0000',
  '\u202e\u200b',
  '😀👩‍👩‍👧',
  '../../etc/passwd',
  '%00%27',
  '${process.exit()}',
  '__proto__',
  'constructor',
);
const anyString = fc.oneof(
  fc.string(),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  hostile,
);
const notAString = fc.oneof(
  fc.integer(),
  fc.boolean(),
  fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 3 }),
  fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
);
const notAStringOrNull = fc.oneof(notAString, fc.constant(null));
/** A reason the API takes: 1-2000 characters, not all blank, any of them hostile. */
const goodReason = fc
  .oneof(fc.string({ minLength: 1, maxLength: 100 }), hostile, fc.string({ unit: 'grapheme', minLength: 1 }))
  .filter((s) => s.trim().length > 0 && s.trim().length <= 2000);
const badReason = fc.oneof(
  notAStringOrNull,
  fc.constantFrom('', '   ', '\n\t'),
  fc.string({ minLength: 2001, maxLength: 2500 }).filter((s) => s.trim().length > 2000),
);
const badId = fc.oneof(
  notAStringOrNull,
  anyString.filter((s) => !/^[A-Za-z0-9_.-]{1,128}$/.test(s)),
  fc
    .string({ minLength: 129, maxLength: 300 })
    .map((s) => `a${s.replace(/[^A-Za-z0-9]/g, 'b')}`.padEnd(129, 'x')),
);
const notOneOf = (...allowed: string[]) =>
  fc.oneof(
    notAStringOrNull,
    anyString.filter((s) => !allowed.includes(s)),
  );
/** JSON nested deeper than the API accepts (64). */
const tooDeep = fc.integer({ min: 65, max: 400 }).map((depth) => {
  let value: unknown = 'bottom';
  for (let i = 0; i < depth; i++) value = i % 2 === 0 ? [value] : { v: value };
  return value;
});

interface BodySpec {
  readonly valid: fc.Arbitrary<Record<string, unknown>>;
  /** Per field, values that make the body invalid. */
  readonly invalid: Record<string, fc.Arbitrary<unknown>>;
  readonly required: readonly string[];
}

const reasonOnly: BodySpec = {
  valid: goodReason.map((reason) => ({ reason })),
  invalid: { reason: badReason },
  required: ['reason'],
};

/** The body of each route, keyed by route. */
const BODIES: Record<string, BodySpec> = {
  '/v1/tool-executions/:key/resolve': {
    valid: fc.record({ status: fc.constantFrom('completed', 'failed'), reason: goodReason }),
    invalid: {
      status: notOneOf('completed', 'failed'),
      reason: badReason,
      result: tooDeep,
      result_reference: fc.oneof(notAString, fc.constant(''), fc.string({ minLength: 513, maxLength: 600 })),
    },
    required: ['status', 'reason'],
  },
  '/v1/tool-executions/:key/compensate': reasonOnly,
  '/v1/runs': {
    valid: fc.record({ agent: fc.constant('credit-agent'), input: fc.jsonValue({ maxDepth: 3 }) }),
    invalid: {
      agent: fc.oneof(
        notAStringOrNull,
        anyString.filter((s) => !/^[A-Za-z0-9_.-]{1,64}$/.test(s)),
      ),
      input: tooDeep,
      run_id: badId,
    },
    required: ['agent', 'input'],
  },
  '/v1/runs/:run_id/cancel': reasonOnly,
  '/v1/runs/:run_id/messages': {
    valid: fc.record({ client_message_id: fc.constant('msg-fuzz'), content: fc.string({ minLength: 1 }) }),
    invalid: {
      client_message_id: badId,
      content: fc.oneof(
        fc.constant(''),
        fc.constant([]),
        fc.integer(),
        fc.constant(null),
        fc.constant([{ type: 'video', url: 'x' }]),
        fc.constant([{ type: 'text', text: 'x', extra: true }]),
        tooDeep,
      ),
    },
    required: ['client_message_id', 'content'],
  },
  '/v1/approvals/:key/approve': { valid: fc.constant({}), invalid: { reason: badReason }, required: [] },
  '/v1/approvals/:key/reject': reasonOnly,
  '/v1/api-keys': {
    valid: fc.record({
      actor_id: fc.constant('new-ops'),
      role: fc.constantFrom('viewer', 'operator', 'admin'),
    }),
    invalid: { actor_id: badId, role: notOneOf('viewer', 'operator', 'admin') },
    required: ['actor_id', 'role'],
  },
};

/** A body text that the route must refuse: exactly one thing about it is wrong. */
function invalidBody(spec: BodySpec): fc.Arbitrary<string> {
  const fields = Object.keys(spec.invalid);
  const wrongField = fc
    .tuple(spec.valid, fc.constantFrom(...fields))
    .chain(([body, field]) => spec.invalid[field]!.map((bad) => JSON.stringify({ ...body, [field]: bad })));
  const missing =
    spec.required.length === 0
      ? []
      : [
          fc.tuple(spec.valid, fc.constantFrom(...spec.required)).map(([body, field]) => {
            const copy = { ...body };
            delete copy[field];
            return JSON.stringify(copy);
          }),
        ];
  // Every valid body's fields are among `invalid`'s, so the extra name is always a new field.
  const extra = fc
    .tuple(
      spec.valid,
      anyString.filter((k) => !(k in spec.invalid)),
      fc.jsonValue({ maxDepth: 1 }),
    )
    .map(([body, name, value]) => JSON.stringify({ ...body, [name]: value }));
  const notObject = fc
    .oneof(
      fc.string(),
      fc.integer(),
      fc.boolean(),
      fc.constant(null),
      fc.array(fc.jsonValue({ maxDepth: 1 })),
    )
    .map((v) => JSON.stringify(v));
  const malformed = fc.oneof(
    spec.valid.chain((body) => {
      const text = JSON.stringify(body);
      return fc.integer({ min: 0, max: text.length - 1 }).map((cut) => text.slice(0, cut));
    }),
    anyString.filter((s) => {
      try {
        JSON.parse(s);
        return false;
      } catch {
        return true;
      }
    }),
    spec.valid.map((body) => JSON.stringify(body).replace(/}$/, ',"n":1e999}')),
  );
  return fc.oneof(wrongField, ...missing, extra, notObject, malformed);
}

/** Any string as a path segment, percent-encoded the way a client would send it. */
function segment(value: string): string {
  try {
    return encodeURIComponent(value);
  } catch {
    return encodeURIComponent(value.replace(/[\ud800-\udfff]/g, '?'));
  }
}

const pathParam = fc.oneof(
  anyString,
  badId.filter((v): v is string => typeof v === 'string'),
  fc.tuple(anyString, anyString).map(([a, b]) => `${a}:${b}`),
  fc.stringMatching(/^[A-Za-z0-9_.-]{1,20}:[A-Za-z0-9_.-]{1,20}$/),
  fc.stringMatching(/^key_[0-9a-f]{12}$/),
  fc.string({ minLength: 300, maxLength: 1500 }),
);

/** The route's path with its parameter replaced by `value`. */
function pathWith(e: Endpoint, seeds: Seeds, value: string): string {
  const real = e.path(seeds);
  const param = /:([a-z_]+)/.exec(e.route)![1]!;
  const actual = {
    key: e.route.includes('approvals')
      ? seeds.approvalKey
      : e.route.includes('/v1/tool-executions')
        ? e.route.endsWith('compensate')
          ? seeds.completedKey
          : e.route.endsWith('/reconcile')
            ? seeds.reconcilableKey
            : seeds.unknownKey
        : undefined,
    run_id: e.route.startsWith('/v1/loop-runs/')
      ? seeds.unknownKey.split(':')[0]
      : e.route.endsWith('/retry')
        ? seeds.failedRunId
        : e.route.endsWith('/messages')
          ? seeds.completedRunId
          : seeds.runId,
    key_id: seeds.keyId,
    workflow_run_id: e.route.endsWith('/decide') ? seeds.pausedWorkflowRunId : seeds.workflowRunId,
  }[param];
  return real.replace(encodeURIComponent(actual!), segment(value));
}

describe.each(DIALECTS)('fuzzing every body and path parameter on %s', (dialect) => {
  let h: ApiHarness;
  let seeds: Seeds;

  beforeAll(async () => {
    h = await ApiHarness.start(dialect);
    seeds = await seed(h);
  });
  afterAll(async () => {
    await h.close();
  });

  const keyFor = (e: Endpoint): string => (e.role === 'admin' ? h.keys.admin : h.keys.operator);

  it.each(
    ENDPOINTS.filter((e) => e.method === 'POST' && BODIES[e.route] !== undefined).map(
      (e) => [`${e.method} ${e.route}`, e] as const,
    ),
  )('%s: every broken body is a 4xx and changes nothing', async (_, e) => {
    const before = await h.snapshot();
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(invalidBody(BODIES[e.route]!), async (text) => {
        const answer = await h.request(e.method, e.path(seeds), { key: keyFor(e), rawBody: text });
        statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
        expect(answer.status, `${text.slice(0, 200)} → ${answer.text.slice(0, 300)}`).toBeGreaterThanOrEqual(
          400,
        );
        expect(answer.status, `${text.slice(0, 200)} → ${answer.text.slice(0, 300)}`).toBeLessThan(500);
        expect(answer.body?.error?.code).toEqual(expect.any(String));
      }),
      { numRuns: RUNS, endOnFailure: true },
    );
    expect(await h.snapshot(), `${e.route} changed the database`).toBe(before);
    expect([...statuses.keys()].every((s) => s >= 400 && s < 500)).toBe(true);
  });

  it.each(ENDPOINTS.filter((e) => e.route.includes(':')).map((e) => [`${e.method} ${e.route}`, e] as const))(
    '%s: every path parameter that names no record of the tenant is a 4xx and changes nothing',
    async (_, e) => {
      const before = await h.snapshot();
      const taken = new Set([
        seeds.unknownKey,
        seeds.reconcilableKey,
        seeds.unknownKey.split(':')[0],
        seeds.completedKey,
        seeds.runId,
        seeds.approvalKey,
        seeds.keyId,
        seeds.failedRunId,
        seeds.completedRunId,
        seeds.workflowRunId,
        seeds.pausedWorkflowRunId,
      ]);
      await fc.assert(
        fc.asyncProperty(
          pathParam.filter((v) => !taken.has(v)),
          async (value) => {
            const answer = await h.request(e.method, pathWith(e, seeds, value), {
              key: keyFor(e),
              ...(e.body === undefined ? {} : { body: e.body(seeds) }),
            });
            expect(
              answer.status,
              `${JSON.stringify(value).slice(0, 200)} → ${answer.text.slice(0, 300)}`,
            ).toBeGreaterThanOrEqual(400);
            expect(
              answer.status,
              `${JSON.stringify(value).slice(0, 200)} → ${answer.text.slice(0, 300)}`,
            ).toBeLessThan(500);
          },
        ),
        { numRuns: RUNS, endOnFailure: true },
      );
      expect(await h.snapshot(), `${e.route} changed the database`).toBe(before);
    },
  );

  it('answers a malformed URL, a wrong media type and a body over the limit with 4xx envelopes', async () => {
    const before = await h.snapshot();
    const resolve = `/v1/tool-executions/${encodeURIComponent(seeds.unknownKey)}/resolve`;
    const cases = [
      await h.request('POST', '/v1/runs/%E0%A4%A/cancel', { key: h.keys.operator, body: { reason: 'x' } }),
      await h.request('POST', resolve, {
        key: h.keys.operator,
        rawBody: 'status=failed&reason=x',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      }),
      await h.request('POST', resolve, { key: h.keys.operator, rawBody: '' }),
      await h.request('POST', resolve, {
        key: h.keys.operator,
        body: { status: 'failed', reason: 'x'.repeat(300 * 1024) },
      }),
      await h.request('POST', resolve, {
        key: h.keys.operator,
        rawBody: '{"status":"failed","reason":"x","__proto__":{"admin":true}}',
      }),
    ];
    expect(cases.map((c) => [c.status, c.body?.error?.code])).toEqual([
      [400, 'API_REQUEST_INVALID'],
      [415, 'API_MEDIA_TYPE_UNSUPPORTED'],
      [400, 'API_REQUEST_INVALID'],
      [413, 'API_REQUEST_TOO_LARGE'],
      [400, 'API_REQUEST_INVALID'],
    ]);
    expect(await h.snapshot()).toBe(before);
  });

  it('answers any query of the lists with 2xx or 4xx, never 5xx, and changes nothing', async () => {
    const before = await h.snapshot();
    const lists = ['/v1/tool-executions', '/v1/runs', '/v1/approvals', '/v1/api-keys'];
    const queryValue = fc.oneof(
      anyString,
      fc.integer().map(String),
      fc.constantFrom('0', '-1', '501', '1e3', 'unknown', 'all'),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...lists),
        fc.dictionary(
          fc.constantFrom('status', 'limit', 'cursor', 'run_id', 'tool', 'agent', 'x'),
          queryValue,
          { maxKeys: 3 },
        ),
        async (list, query) => {
          const search = new URLSearchParams(
            Object.entries(query).map(([k, v]): [string, string] => [k, v.replace(/[\ud800-\udfff]/g, '?')]),
          );
          const answer = await h.request('GET', `${list}?${search.toString()}`, { key: h.keys.admin });
          expect(answer.status, `${list}?${search.toString()} → ${answer.text.slice(0, 300)}`).toBeLessThan(
            500,
          );
        },
      ),
      { numRuns: RUNS * 2, endOnFailure: true },
    );
    expect(await h.snapshot()).toBe(before);
  });
});
