import { readFileSync } from 'node:fs';
import { Validator } from '@seriousme/openapi-schema-validator';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { routesOf } from '../../src/api/index.js';
import { ApiHarness } from './support/harness.js';

interface Operation {
  security?: unknown;
  parameters?: { in: string; name: string; required?: boolean }[];
  requestBody?: {
    content: Record<string, { schema: { required?: string[]; properties?: Record<string, unknown> } }>;
  };
  responses: Record<string, unknown>;
}
type Doc = { openapi: string; paths: Record<string, Record<string, Operation>> };

const PUBLIC = ['/healthz', '/readyz', '/metrics', '/openapi.json'];
/** The console's page and assets (docs/console.md, tested in a browser): pages, not API operations. */
const isConsole = (url: string): boolean => url === '/' || url === '/console' || url.startsWith('/console/');

describe('GET /openapi.json', () => {
  let h: ApiHarness;
  let doc: Doc;

  beforeAll(async () => {
    h = await ApiHarness.start('sqlite');
    const answer = await h.request('GET', '/openapi.json');
    expect(answer.status).toBe(200);
    doc = answer.body as Doc;
  });
  afterAll(async () => {
    await h.close();
  });

  it('is a valid OpenAPI 3.1 document whose references all resolve', async () => {
    expect(doc.openapi).toBe('3.1.0');
    const validator = new Validator();
    const result = await validator.validate(structuredClone(doc));
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(() => validator.resolveRefs()).not.toThrow();
  });

  it('lists exactly the routes the server has, and only those', () => {
    const documented = Object.entries(doc.paths)
      .flatMap(([path, operations]) => Object.keys(operations).map((m) => `${m.toUpperCase()} ${path}`))
      .sort();
    const served = routesOf(h.app)
      .filter((r) => !isConsole(r.url))
      .map((r) => `${r.method} ${r.url.replace(/:([a-z_]+)/g, '{$1}')}`)
      .sort();
    expect(served.length).toBeGreaterThan(15);
    expect(documented).toEqual(served);
  });

  it('marks every /v1 operation as needing the bearer key, and the operational ones as public', () => {
    for (const [path, operations] of Object.entries(doc.paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        if (PUBLIC.includes(path)) expect(operation.security, `${method} ${path}`).toBeUndefined();
        else expect(operation.security, `${method} ${path}`).toEqual([{ bearer: [] }]);
      }
    }
  });

  it('declares each path parameter, and the bodies the server validates (resolve needs status and reason)', () => {
    for (const [path, operations] of Object.entries(doc.paths)) {
      const names = [...path.matchAll(/\{([a-z_]+)\}/g)].map((m) => m[1]);
      for (const operation of Object.values(operations)) {
        const declared = (operation.parameters ?? []).filter((p) => p.in === 'path').map((p) => p.name);
        expect(declared.sort()).toEqual(names.sort());
      }
    }
    const resolve = doc.paths['/v1/tool-executions/{key}/resolve']!.post!;
    const schema = resolve.requestBody!.content['application/json']!.schema;
    expect(schema.required?.sort()).toEqual(['reason', 'status']);
    expect(schema.properties?.status).toMatchObject({ enum: ['completed', 'failed'] });
    expect(Object.keys(resolve.responses).sort()).toEqual([
      '200',
      '400',
      '401',
      '403',
      '404',
      '409',
      '413',
      '415',
      '500',
    ]);
    const events = doc.paths['/v1/runs/{run_id}/events']!.get!;
    expect(Object.keys((events.responses['200'] as { content: object }).content)).toEqual([
      'text/event-stream',
    ]);
  });

  it('docs/api.md has a section, with an example, for every route', () => {
    const doc = readFileSync(new URL('../../docs/api.md', import.meta.url), 'utf8');
    const sections = doc.split(/^### /m).slice(1);
    for (const route of routesOf(h.app).filter((r) => !isConsole(r.url))) {
      const heading = `\`${route.method} ${route.url.replace(/:([a-z_]+)/g, '{$1}')}\``;
      const section = sections.find((s) => s.startsWith(heading));
      expect(section, `docs/api.md has no section ${heading}`).toBeDefined();
      expect(section, `docs/api.md: ${heading} has no example`).toMatch(/```/);
    }
  });
});
