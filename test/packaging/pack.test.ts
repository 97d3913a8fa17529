import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installedAiMajor } from '../../src/models/ai-runtime.js';
import { ROOT } from '../support/processes.js';

/*
 * The package as a user gets it: `npm pack`, then `npm install` of the tarball into a fresh project
 * with `--engine-strict` (the dependency tree must accept this Node), used from an ES module and from
 * CommonJS. The install compiles better-sqlite3 as a user's would, so this file takes a few minutes.
 * The project installs what a user of the loop adapters would (ai, zod, @openai/agents-core) and
 * none of the optional peers below, whose absence is checked and whose errors are read.
 */

const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
/** The AI SDK the consumer installs beside oncely: the generation this checkout runs (6, or 7 in CI's Node 24 leg). */
const AI_SDK = installedAiMajor() ?? 6;
/** Optional peer dependencies a user installs only for what needs them (see the README's Install section). */
const OPTIONAL_PEERS = ['@ai-sdk/openai', '@ai-sdk/anthropic', '@ai-sdk/openai-compatible', 'pg', 'ioredis'];
/**
 * Subpath exports whose import needs a peer this project does not install, with that peer; every
 * other subpath in the package's `exports` must import. A subpath added to `exports` (such as
 * `oncely/mcp-server`, a server-side MCP helper) is imported here without a change; list it only if
 * its import needs a peer that is not installed (@modelcontextprotocol/sdk is not).
 */
const SUBPATH_PEERS: Record<string, string> = {};
const run = (cmd: string, args: string[], cwd: string): string =>
  execFileSync(cmd, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20 });

/** The quickstart without TypeScript: the same calls, the same output. */
const QUICKSTART = `
const credits = new Map();
const issueCredit = defineTool({
  name: 'issue_credit',
  description: "Credit a customer's account",
  input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
  effect: external(),
  execute: ({ amountCents }, ctx) => {
    if (!credits.has(ctx.idempotencyKey)) credits.set(ctx.idempotencyKey, amountCents);
    return { receipt: 'cr_' + ctx.idempotencyKey };
  },
});
const ledger = await openLedger('sqlite:' + process.argv[2]);
const call = { tenantId: 'acme', runId: 'run_' + Date.now(), toolCallId: 'call_1' };
const args = { accountId: 'acct_7', amountCents: 2500 };
const first = await executeToolCall(ledger, issueCredit, args, call);
const replay = await executeToolCall(ledger, issueCredit, args, call);
console.log(first.status, replay.status, replay.status === 'completed' ? replay.source : '-', credits.size);
await ledger.close();
`;

describe('the published package', () => {
  let dir: string;
  let project: string;
  let tarball: string;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'oncely-pack-'));
    const [packed] = JSON.parse(run(NPM, ['pack', '--json', '--pack-destination', dir], ROOT)) as {
      filename: string;
    }[];
    tarball = join(dir, packed!.filename);
    project = join(dir, 'consumer');
    mkdirSync(project);
    run(NPM, ['init', '-y'], project); // a default project: CommonJS
    run(
      NPM,
      [
        'install',
        tarball,
        `ai@${AI_SDK}`,
        'zod@4',
        '--engine-strict',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
      ],
      project,
    );
    // The newest Agents SDK the peer range admits, as a user of oncely/openai-agents adds it: not
    // under --engine-strict, since its own dependency (openai 7.60+) declares Node >= 22 yet runs on 20.
    run(NPM, ['install', '@openai/agents-core', '--no-audit', '--no-fund', '--prefer-offline'], project);
  }, 600_000);
  afterAll(() => {
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('ships its licence, its metadata and no script it does not ship', () => {
    const installed = join(project, 'node_modules', 'oncely');
    const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as {
      scripts?: Record<string, string>;
      repository?: { url?: string };
      bugs?: unknown;
      homepage?: string;
      license?: string;
      keywords?: string[];
    };
    expect(readFileSync(join(installed, 'LICENSE'), 'utf8')).toContain('Apache License');
    expect(manifest.license).toBe('Apache-2.0');
    expect(manifest.repository?.url).toMatch(/^git\+https:\/\//);
    expect(manifest.bugs).toBeDefined();
    expect(manifest.homepage).toBeDefined();
    expect(manifest.keywords?.length).toBeGreaterThan(0);
    expect(manifest.scripts?.prepare).toBeUndefined();
    for (const [name, script] of Object.entries(manifest.scripts ?? {})) {
      for (const file of script.match(/scripts\/[\w.-]+/g) ?? []) {
        if (['prepare', 'install', 'postinstall', 'preinstall'].includes(name)) {
          expect(existsSync(join(installed, file)), `${name} runs ${file}`).toBe(true);
        }
      }
    }
  });

  it('ships source maps that carry their sources', () => {
    const dist = join(project, 'node_modules', 'oncely', 'dist');
    const maps = readdirSync(dist, { recursive: true, encoding: 'utf8' }).filter((f) =>
      f.endsWith('.js.map'),
    );
    expect(maps.length).toBeGreaterThan(50);
    const missing = maps.filter((f) => {
      const map = JSON.parse(readFileSync(join(dist, f), 'utf8')) as {
        sources: string[];
        sourcesContent?: unknown[];
      };
      return map.sourcesContent?.length !== map.sources.length;
    });
    expect(missing).toEqual([]);
  });

  it('runs the quickstart from an ES module', () => {
    writeFileSync(
      join(project, 'quickstart.mjs'),
      `import { z } from 'zod';\nimport { defineTool, executeToolCall, external, openLedger } from 'oncely';\n${QUICKSTART}`,
    );
    expect(run(process.execPath, ['quickstart.mjs', join(dir, 'esm.db')], project).trim()).toBe(
      'completed completed ledger 1',
    );
  });

  it('imports every subpath it exports', () => {
    const manifest = JSON.parse(
      readFileSync(join(project, 'node_modules', 'oncely', 'package.json'), 'utf8'),
    ) as { exports: Record<string, unknown> };
    const subpaths = Object.keys(manifest.exports)
      .filter((p) => p !== './package.json')
      .map((p) => p.replace(/^\./, 'oncely'));
    expect(subpaths).toEqual(expect.arrayContaining(['oncely', 'oncely/ai-sdk', 'oncely/openai-agents']));
    const probe = `
      const results = {};
      for (const p of ${JSON.stringify(subpaths)}) {
        results[p] = await import(p).then((m) => Object.keys(m).length, (e) => String(e.message));
      }
      console.log(JSON.stringify(results));`;
    writeFileSync(join(project, 'subpaths.mjs'), probe);
    const results = JSON.parse(run(process.execPath, ['subpaths.mjs'], project)) as Record<
      string,
      number | string
    >;
    for (const subpath of subpaths) {
      const peer = SUBPATH_PEERS[subpath.replace(/^oncely/, '.')];
      if (peer === undefined) expect(results[subpath], subpath).toBeGreaterThan(0);
      else expect(results[subpath], subpath).toContain(peer);
    }
  });

  it('installs none of its optional peers, and names the one a model needs', () => {
    const present = OPTIONAL_PEERS.filter((p) => existsSync(join(project, 'node_modules', p)));
    expect(present).toEqual([]);
    const major = AI_SDK >= 7 ? 4 : 3;
    writeFileSync(
      join(project, 'missing-provider.mjs'),
      `import { createModel } from 'oncely';
       await createModel({ provider: 'openai', model: 'gpt-5-mini' }, { OPENAI_API_KEY: 'k' }).then(
         () => console.log('made'),
         (e) => console.log(e.code + ': ' + e.message),
       );`,
    );
    expect(run(process.execPath, ['missing-provider.mjs'], project).trim()).toBe(
      'PACKAGE_MISSING: the openai model "gpt-5-mini" needs the package @ai-sdk/openai, which is not ' +
        `installed: install it with \`npm install @ai-sdk/openai@${major}\``,
    );
  });

  it(`guards an AI SDK ${AI_SDK} loop with the installed package: one credit, replayed after a restart`, () => {
    // The newest model specification the installed SDK has a mock of (v4 under AI SDK 7).
    const loop = `
      import { generateText, stepCountIs } from 'ai';
      import * as sdkTest from 'ai/test';
      import { z } from 'zod';
      import { defineTool, external, openLedger } from 'oncely';
      import { durableLoop } from 'oncely/ai-sdk';
      const Mock = sdkTest.MockLanguageModelV4 ?? sdkTest.MockLanguageModelV3;
      const usage = { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } };
      const answers = () => [
        { content: [{ type: 'tool-call', toolCallId: 'p1', toolName: 'issue_credit', input: '{"amountCents":2500}' }],
          finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [] },
        { content: [{ type: 'text', text: 'Done.' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] },
      ];
      const credits = [];
      const issueCredit = defineTool({
        name: 'issue_credit', description: 'Credit', effect: external(),
        input: z.object({ amountCents: z.number().int() }),
        execute: ({ amountCents }, ctx) => { credits.push(ctx.idempotencyKey); return { amountCents }; },
      });
      const ledger = await openLedger('sqlite:' + process.argv[2]);
      const texts = [];
      for (let restart = 0; restart < 2; restart++) {
        const script = answers();
        const model = new Mock({ doGenerate: async () => script.shift() });
        const loop = durableLoop({ ledger, tenantId: 'acme', runId: 'r1' });
        const result = await loop.run(() => generateText({
          model: loop.model(model), tools: loop.tools([issueCredit]), stopWhen: stepCountIs(3), prompt: 'Refund',
        }));
        texts.push(result.text);
      }
      await ledger.close();
      console.log(Mock.name, texts.join(','), credits.length);
    `;
    writeFileSync(join(project, 'loop.mjs'), loop);
    const mock = AI_SDK >= 7 ? 'MockLanguageModelV4' : 'MockLanguageModelV3';
    expect(run(process.execPath, ['loop.mjs', join(dir, 'loop.db')], project).trim()).toBe(
      `${mock} Done.,Done. 1`,
    );
  });

  it('guards an OpenAI Agents SDK run with the installed package: one credit, replayed after a restart', () => {
    // A model object in place of the SDK's OpenAI model (no network): it asks for one credit, then answers.
    const agents = `
      import { Agent, Runner, Usage } from '@openai/agents-core';
      import { z } from 'zod';
      import { defineTool, external, openLedger } from 'oncely';
      import { durableAgentRun } from 'oncely/openai-agents';
      const credits = [];
      const issueCredit = defineTool({
        name: 'issue_credit', description: 'Credit', effect: external(),
        input: z.object({ amountCents: z.number().int() }),
        execute: ({ amountCents }, ctx) => { credits.push(ctx.idempotencyKey); return { amountCents }; },
      });
      let asked = 0;
      const model = {
        async getResponse(request) {
          asked += 1;
          const first = typeof request.input === 'string' || !request.input.some((i) => i.type === 'function_call_result');
          const output = first
            ? [{ type: 'function_call', callId: 'c1', name: 'issue_credit', arguments: '{"amountCents":2500}', status: 'completed' }]
            : [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Refunded.' }] }];
          return { output, usage: new Usage({ requests: 1, inputTokens: 1, outputTokens: 1, totalTokens: 2 }) };
        },
        getStreamedResponse() { throw new Error('not streamed'); },
      };
      const ledger = await openLedger('sqlite:' + process.argv[2]);
      const runner = new Runner({ tracingDisabled: true });
      const outputs = [];
      for (let restart = 0; restart < 2; restart++) {
        const run = durableAgentRun({ ledger, tenantId: 'acme', runId: 'r1' });
        const agent = new Agent({ name: 'billing', instructions: 'Refund.', model: run.model(model), tools: run.tools([issueCredit]) });
        const result = await run.run(() => runner.run(agent, 'Refund order 42'));
        outputs.push(String(result.finalOutput));
      }
      await ledger.close();
      console.log(outputs.join(','), asked, credits.length);
    `;
    writeFileSync(join(project, 'agents.mjs'), agents);
    const version = (
      JSON.parse(
        readFileSync(join(project, 'node_modules', '@openai', 'agents-core', 'package.json'), 'utf8'),
      ) as { version: string }
    ).version;
    console.log(`@openai/agents-core ${version} in the installed project`);
    expect(run(process.execPath, ['agents.mjs', join(dir, 'agents.db')], project).trim()).toBe(
      'Refunded.,Refunded. 2 1',
    );
  });

  it('runs an MCP server guarded by oncely/mcp-server and its client through oncely/mcp: one credit', () => {
    // The MCP SDK, as a server's author adds it (an optional peer of oncely's).
    run(
      NPM,
      ['install', '@modelcontextprotocol/sdk', '--no-audit', '--no-fund', '--prefer-offline'],
      project,
    );
    const mcp = `
      import { Client } from '@modelcontextprotocol/sdk/client/index.js';
      import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
      import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
      import { z } from 'zod';
      import { executeToolCall, openLedger } from 'oncely';
      import { mcpTools } from 'oncely/mcp';
      import { onceOnly } from 'oncely/mcp-server';
      const credits = [];
      const server = onceOnly(new McpServer({ name: 'billing', version: '1.0.0' }), { store: 'sqlite:' + process.argv[2] });
      server.registerTool('issue_credit', {
        description: 'Credit', inputSchema: { accountId: z.string(), amountCents: z.number().int().positive() },
        annotations: { readOnlyHint: false },
      }, ({ accountId }) => {
        credits.push(accountId);
        return { content: [{ type: 'text', text: 'credited' }], structuredContent: { receipt: 'cr_' + credits.length } };
      });
      const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
      await server.connect(serverSide);
      const client = new Client({ name: 'bot', version: '1.0.0' });
      await client.connect(clientSide);
      const tools = await mcpTools(client, { prefix: 'billing', reconcile: { issue_credit: 'server' } });
      const ledger = await openLedger('sqlite:' + process.argv[3]);
      const call = { tenantId: 'acme', runId: 'r1', toolCallId: 'call_1' };
      const args = { accountId: 'acct_7', amountCents: 2500 };
      const first = await executeToolCall(ledger, tools[0], args, call);
      // The same request again under its key, as after a lost answer: the stored result, no second credit.
      const again = await client.callTool({ name: 'issue_credit', arguments: args, _meta: { 'oncely/idempotencyKey': 'r1:call_1' } });
      const status = await client.callTool({ name: 'oncely_key_status', arguments: { key: 'r1:call_1' } });
      console.log(tools.map((t) => t.name).join(','), first.status, again._meta?.['oncely/replayed'], status.structuredContent.status, credits.length);
      await ledger.close();
      await client.close();
    `;
    writeFileSync(join(project, 'mcp.mjs'), mcp);
    expect(
      run(process.execPath, ['mcp.mjs', join(dir, 'mcp-keys.db'), join(dir, 'mcp.db')], project).trim(),
    ).toBe('billing_issue_credit completed true completed 1');
  });

  it('ships the chat example, whose configuration and tools load from the installed package', () => {
    const example = join(project, 'node_modules', 'oncely', 'examples', 'chat');
    expect(readdirSync(example).sort()).toEqual(['oncely.yaml', 'public', 'server.mjs', 'tools.mjs']);
    writeFileSync(
      join(project, 'chat-config.mjs'),
      `import { loadConfig } from 'oncely';
       const config = await loadConfig(process.argv[2]);
       console.log([...config.agents.keys()].join(','), [...config.tools.keys()].sort().join(','));`,
    );
    expect(run(process.execPath, ['chat-config.mjs', join(example, 'oncely.yaml')], project).trim()).toBe(
      'penny issue_refund,lookup_order',
    );
  });

  it('ships the markdown docs, not the screenshots or benchmark data', () => {
    const docs = readdirSync(join(project, 'node_modules', 'oncely', 'docs'));
    expect(docs).toEqual(expect.arrayContaining(['errors.md', 'operations.md']));
    expect(docs.filter((f) => !f.endsWith('.md'))).toEqual([]);
  });

  it('is required from CommonJS, in a default npm init project', () => {
    const manifest = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8')) as { type?: string };
    expect(manifest.type).not.toBe('module');
    writeFileSync(
      join(project, 'quickstart.cjs'),
      `const { z } = require('zod');\nconst { defineTool, executeToolCall, external, openLedger } = require('oncely');\n` +
        `(async () => {${QUICKSTART}})().catch((e) => { console.error(e); process.exit(1); });`,
    );
    expect(run(process.execPath, ['quickstart.cjs', join(dir, 'cjs.db')], project).trim()).toBe(
      'completed completed ledger 1',
    );
  });

  it('is cheap to import: no store driver, AI SDK or YAML parser until used', () => {
    const probe = `
      const t = performance.now();
      await import('oncely');
      console.log(JSON.stringify({ ms: performance.now() - t, rssMiB: process.memoryUsage().rss / 1048576 }));`;
    writeFileSync(join(project, 'import-cost.mjs'), probe);
    const out = JSON.parse(run(process.execPath, ['import-cost.mjs'], project)) as {
      ms: number;
      rssMiB: number;
    };
    // Reported, not judged by time (the bench measures it side by side); what loads is judged.
    console.log(
      `import('oncely') from the installed package: ${out.ms.toFixed(0)} ms, ${out.rssMiB.toFixed(0)} MiB RSS`,
    );
    // Every module the import resolves, through a resolve hook that logs each URL.
    writeFileSync(
      join(project, 'log-hooks.mjs'),
      `import { appendFileSync } from 'node:fs';
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  appendFileSync(process.env.LOAD_LOG, resolved.url + '\\n');
  return resolved;
}`,
    );
    writeFileSync(
      join(project, 'log-register.mjs'),
      `import { register } from 'node:module';\nregister('./log-hooks.mjs', import.meta.url);`,
    );
    writeFileSync(join(project, 'import-only.mjs'), `await import('oncely');`);
    const log = join(dir, 'loaded.log');
    execFileSync(process.execPath, ['--import', './log-register.mjs', 'import-only.mjs'], {
      cwd: project,
      env: { ...process.env, LOAD_LOG: log },
    });
    const packages = new Set(
      readFileSync(log, 'utf8')
        .split('\n')
        .flatMap((url) => /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1] ?? []),
    );
    expect(packages.has('oncely')).toBe(true);
    for (const heavy of [
      'pg',
      'better-sqlite3',
      'ai',
      'yaml',
      '@ai-sdk/openai',
      '@ai-sdk/anthropic',
      'fastify',
      'ioredis',
    ]) {
      expect(packages.has(heavy), `${heavy} is loaded by import('oncely')`).toBe(false);
    }
  });

  // Last: it changes the consumer's zod.
  it('installs and runs beside zod 3 (3.25, which carries zod/v4) at the project root', () => {
    // The Agents SDK needs zod 4 (and its openai declares Node >= 22): a zod 3 project goes without it.
    run(NPM, ['uninstall', '@openai/agents-core', '--no-audit', '--no-fund'], project);
    run(NPM, ['install', 'zod@3', '--engine-strict', '--no-audit', '--no-fund', '--prefer-offline'], project);
    const zod = JSON.parse(readFileSync(join(project, 'node_modules', 'zod', 'package.json'), 'utf8')) as {
      version: string;
    };
    expect(zod.version).toMatch(/^3\.(2[5-9]|[3-9]\d)\./);
    writeFileSync(
      join(project, 'quickstart-zod3.mjs'),
      `import { z } from 'zod';\nimport { defineTool, executeToolCall, external, openLedger } from 'oncely';\n${QUICKSTART}`,
    );
    expect(run(process.execPath, ['quickstart-zod3.mjs', join(dir, 'zod3.db')], project).trim()).toBe(
      'completed completed ledger 1',
    );
  });
});
