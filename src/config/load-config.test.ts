import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isOncelyError } from '../errors/index.js';
import type { ScriptedModel } from '../models/index.js';
import { loadConfig } from './load-config.js';

const srcDir = fileURLToPath(new URL('..', import.meta.url));
const zodEntry = fileURLToPath(import.meta.resolve('zod'));

const TOOLS_MODULE = `
import { z } from ${JSON.stringify(zodEntry)};
import { defineTool, external, read } from ${JSON.stringify(join(srcDir, 'tools/index.ts'))};

export const issueCredit = defineTool({
  name: 'issue_credit',
  description: "Credit a customer's account",
  input: z.object({ accountId: z.string(), amountCents: z.number().int().positive() }),
  effect: external(),
  execute: (_args, ctx) => ({ receipt: ctx.idempotencyKey }),
});
const lookupOrder = defineTool({
  name: 'lookup_order',
  description: 'Look up an order',
  input: z.object({ orderId: z.string() }),
  effect: read(),
  execute: () => ({ status: 'shipped' }),
});
export default [issueCredit, lookupOrder];
export const notATool = 42;
`;

const VALID = `# a valid configuration
storage:
  database_url: sqlite:.oncely/test.db
tools: ./tools.ts
models:
  default: { provider: scripted, steps: [ { text: "hi" } ] }
  from_file: { provider: scripted, script: ./script.json }
agents:
  - name: billing-assistant
    instructions: Help customers with billing.
    model: default
    tools: [issue_credit, lookup_order]
    tool_policy: { on_indeterminate: pause, on_repeat: { default: ask, tools: { issue_credit: refuse } } }
    max_steps: 10
  - name: greeter
    instructions: Say hello.
    model: from_file
`;

let dir: string;
let counter = 0;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'oncely-config-'));
  await writeFile(join(dir, 'tools.ts'), TOOLS_MODULE);
  await writeFile(join(dir, 'script.json'), JSON.stringify([{ text: 'hello from a file' }]));
  await writeFile(join(dir, 'broken-tools.ts'), 'throw new Error("the tools module exploded");\n');
  await writeFile(join(dir, 'empty-tools.ts'), 'export const answer = 42;\n');
  await writeFile(
    join(dir, 'wf-tools.ts'),
    `${TOOLS_MODULE}
export const hookedCredit = defineTool({
  name: 'hooked_credit',
  description: 'Credit, with a lookup by key',
  input: z.object({ accountId: z.string() }),
  effect: external(),
  execute: (_args, ctx) => ({ receipt: ctx.idempotencyKey }),
  reconcile: () => ({ status: 'failed', reason: 'not found' }),
});
`,
  );
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function configFile(text: string): Promise<string> {
  counter += 1;
  const file = join(dir, `oncely-${counter}.yaml`);
  await writeFile(file, text);
  return file;
}

/** Loads a configuration that must be refused, and returns the message. */
async function refusal(text: string, code = 'CONFIG_INVALID', env: Record<string, string> = {}) {
  const file = await configFile(text);
  const error = await loadConfig(file, { env }).catch((e: unknown) => e);
  expect(isOncelyError(error)).toBe(true);
  expect((error as { code: string }).code).toBe(code);
  return { file, message: (error as Error).message };
}

const WORKFLOW_AGENTS = `
tools: ./wf-tools.ts
models:
  default: { provider: scripted, steps: [ { text: "hi" } ] }
agents:
  - { name: payer, instructions: Pay., model: default, tools: [issue_credit, lookup_order] }
  - { name: hooked, instructions: Pay., model: default, tools: [hooked_credit, lookup_order] }
  - { name: reader, instructions: Read., model: default, tools: [lookup_order] }
`;

describe('loadConfig: workflows', () => {
  it('builds workflows with templates and conditions, and refuses nothing safe', async () => {
    const file = await configFile(`${WORKFLOW_AGENTS}
workflows:
  - name: review
    input_schema: { type: object, properties: { order: { type: string } }, required: [order] }
    nodes:
      look: { agent: reader, input: 'Order {{input.order}}', recovery_policy: retry, max_attempts: 4 }
      pay:
        agent: hooked
        needs: [look]
        input: { note: '{{nodes.look.text}}', order: '{{input.order}}' }
        when: { node: look, contains: refund }
        recovery_policy: retry
      tell: { agent: payer, needs: [pay], recovery_policy: pause }
    result: 'done: {{nodes.pay.text}}'
`);
    const config = await loadConfig(file, { env: {} });
    const review = config.workflows.get('review');
    expect(review?.nodes.map((n) => [n.name, n.recoveryPolicy, n.maxAttempts])).toEqual([
      ['look', 'retry', 4],
      ['pay', 'retry', 3],
      ['tell', 'pause', 1],
    ]);
    const [look, pay] = review?.nodes ?? [];
    const context = { input: { order: 'ord_1' }, nodes: { look: { text: 'a refund is due' } } };
    expect(look?.input?.(context)).toBe('Order ord_1');
    expect(pay?.input?.(context)).toEqual({ note: 'a refund is due', order: 'ord_1' });
    expect(pay?.when?.(context)).toBe(true);
    expect(pay?.when?.({ ...context, nodes: { look: { text: 'all fine' } } })).toBe(false);
    expect(review?.result?.({ ...context, nodes: { pay: { text: 'paid' } } })).toBe('done: paid');
    expect(review?.input?.check({ order: 7 }).ok).toBe(false);
    await config.close();
  });

  it('refuses retry on a node whose agent can call an unguarded write, naming the workflow, the node and the tool', async () => {
    const { message } = await refusal(`${WORKFLOW_AGENTS}
workflows:
  - name: payout
    nodes:
      pay: { agent: payer, recovery_policy: retry }
`);
    expect(message).toMatch(/workflows\[0\]\.nodes: workflow "payout" \(workflows\[0\]\), node "pay"/);
    expect(message).toContain('"issue_credit" (external(), no reconcile hook)');
    expect(message).not.toContain('"lookup_order"');
  });

  it('says what else is wrong: unknown needs and agents, cycles, bad templates, conditions on nodes not needed', async () => {
    const { message } = await refusal(`${WORKFLOW_AGENTS}
workflows:
  - name: broken
    nodes:
      a: { agent: reader, needs: [b] }
      b: { agent: reader, needs: [a] }
  - name: ghosts
    nodes:
      a: { agent: nobody }
      b: { agent: reader, needs: [zz] }
  - name: templates
    nodes:
      a: { agent: reader, input: '{{#open}} never closed' }
      b: { agent: reader, when: { node: a, equals: x } }
      c: { agent: reader, needs: [a], when: { node: a, matches: '(' } }
`);
    expect(message).toContain('a, b need each other in a cycle');
    expect(message).toContain('there is no node "zz"');
    expect(message).toMatch(/workflows\[2\]\.nodes\.a\.input: Unclosed section "open"/);
    expect(message).toContain('workflows[2].nodes.b.when.node: a condition is on a node this node needs');
    expect(message).toContain('workflows[2].nodes.c.when.matches');
  });
});

describe('loadConfig', () => {
  it("takes a model's timeout_ms as its agents' model timeout, unless an agent sets its own", async () => {
    const file = await configFile(`
models:
  slow:
    provider: openai-compatible
    name: local
    base_url: http://127.0.0.1:11434/v1
    model: llama
    timeout_ms: 300000
agents:
  - { name: a, instructions: x, model: slow }
  - { name: b, instructions: x, model: slow, model_timeout_ms: 5000 }
`);
    const config = await loadConfig(file, { env: {} });
    expect(config.agents.get('a')?.modelTimeoutMs).toBe(300_000);
    expect(config.agents.get('b')?.modelTimeoutMs).toBe(5_000);
    await config.close();
  });

  it('resolves agents with their models and tools', async () => {
    const file = await configFile(VALID);
    const config = await loadConfig(file, { env: {} });
    expect(config.path).toBe(file);
    expect(config.databaseUrl).toBe('sqlite:.oncely/test.db');
    expect([...config.tools.keys()].sort()).toEqual(['issue_credit', 'lookup_order']);
    const billing = config.agents.get('billing-assistant');
    expect(billing?.instructions).toBe('Help customers with billing.');
    expect(billing?.tools.map((t) => t.name)).toEqual(['issue_credit', 'lookup_order']);
    expect(billing?.tools[0]).toBe(config.tools.get('issue_credit'));
    expect(billing?.toolPolicy).toEqual({
      onIndeterminate: 'pause',
      onRepeat: { default: 'ask', tools: { issue_credit: 'refuse' } },
    });
    expect(billing?.maxSteps).toBe(10);
    const greeter = config.agents.get('greeter');
    expect(greeter?.toolPolicy).toEqual({ onIndeterminate: 'fail', onRepeat: { default: 'ask', tools: {} } });
    expect(greeter?.maxSteps).toBe(20);
    expect(greeter?.tools).toEqual([]);
    const result = await greeter?.model.doGenerate({
      prompt: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }],
    });
    expect(result?.content).toEqual([{ type: 'text', text: 'hello from a file' }]);
    expect((greeter?.model as ScriptedModel).received).toHaveLength(1);
  });

  it('lets ONCELY_DATABASE_URL win over storage.database_url', async () => {
    const file = await configFile(VALID);
    const config = await loadConfig(file, { env: { ONCELY_DATABASE_URL: 'postgres://db/oncely' } });
    expect(config.databaseUrl).toBe('postgres://db/oncely');
    const bare = await loadConfig(await configFile('agents: []\n'), { env: {} });
    expect(bare.databaseUrl).toBeUndefined();
    expect(bare.agents.size).toBe(0);
  });

  it('refuses a value out of its set, with path, line:col and the expectation', async () => {
    const { file, message } = await refusal(
      VALID.replace('on_indeterminate: pause', 'on_indeterminate: wait'),
    );
    expect(message).toBe(
      `${file}:13:38: agents[0].tool_policy.on_indeterminate: expected "pause" or "fail", got "wait"`,
    );
  });

  it('refuses unknown keys, pointing at the key and listing the known ones', async () => {
    const { file, message } = await refusal(VALID.replace('    max_steps: 10', '    max_step: 10'));
    expect(message).toBe(
      `${file}:14:5: agents[0].max_step: unknown key "max_step"; expected one of: ` +
        'name, instructions, model, tools, tool_policy, max_steps, token_budget, stream, model_timeout_ms, model_outage_retries',
    );
    const top = await refusal(`${VALID}extra: 1\n`);
    expect(top.message).toContain(
      `${top.file}:18:1: extra: unknown key "extra"; expected one of: storage, tools, mcp_servers, tool_concurrency, models, agents, workflows, runtime`,
    );
  });

  it('refuses a file whose YAML aliases would expand without bound, with a coded one-line error', async () => {
    const bomb = [
      'a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]',
      'b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]',
      'c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]',
      'd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]',
      'e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]',
      '',
    ].join('\n');
    const { file, message } = await refusal(bomb);
    expect(message).toBe(
      `${file}: its YAML aliases expand too far (more than 100 uses); write the values out instead of nesting aliases`,
    );
  });

  it('refuses wrong types and missing fields', async () => {
    const { file, message } = await refusal(
      VALID.replace('max_steps: 10', 'max_steps: ten').replace('    instructions: Say hello.\n', ''),
    );
    expect(message).toContain(`${file} has 2 problems:`);
    expect(message).toContain(`${file}:14:16: agents[0].max_steps: expected a number, got "ten"`);
    expect(message).toContain(`${file}:15:5: agents[1].instructions: expected a string, but it is missing`);
  });

  it('refuses an unknown provider, listing the ones there are', async () => {
    const { file, message } = await refusal(
      VALID.replace('{ provider: scripted, script', '{ provider: gemini, script'),
    );
    expect(message).toBe(
      `${file}:7:26: models.from_file.provider: expected "openai", "anthropic", "openai-compatible" or "scripted", got "gemini"`,
    );
  });

  it('refuses a bad model configuration with the known keys of its provider', async () => {
    const { file, message } = await refusal(
      VALID.replace(
        '{ provider: scripted, script: ./script.json }',
        '{ provider: openai-compatible, model: m, name: x, baseurl: y }',
      ),
    );
    expect(message).toContain(
      `${file}:7:14: models.from_file.base_url: expected a string, but it is missing`,
    );
    expect(message).toContain(
      `${file}:7:64: models.from_file.baseurl: unknown key "baseurl"; expected one of: provider, name, base_url, model, api_key_env`,
    );
  });

  it('refuses YAML that does not parse, with its line', async () => {
    const { file, message } = await refusal('agents:\n  - name: a\n    model: [default\n');
    expect(message).toMatch(new RegExp(`^${escape(file)}:\\d+:\\d+: YAML syntax error: `));
    const dup = await refusal('agents: []\nagents: []\n');
    expect(dup.message).toContain(`${dup.file}:2:1: YAML syntax error: Map keys must be unique`);
  });

  it('refuses an agent naming a model or tool that does not exist, listing those that do', async () => {
    const { file, message } = await refusal(
      VALID.replace('model: default', 'model: fast').replace(
        '[issue_credit, lookup_order]',
        '[issue_credit, refund]',
      ),
    );
    expect(message).toContain(
      `${file}:11:12: agents[0].model: there is no model "fast"; the models are: default, from_file`,
    );
    expect(message).toContain(
      `${file}:12:27: agents[0].tools[1]: there is no tool "refund"; the tools module ./tools.ts exports: issue_credit, lookup_order`,
    );
  });

  it('limits a tool cluster-wide with tool_concurrency, and refuses a limit on a tool that does not exist', async () => {
    const file = await configFile(VALID.replace('agents:', 'tool_concurrency: { issue_credit: 3 }\nagents:'));
    const config = await loadConfig(file, { env: {} });
    expect(config.tools.get('issue_credit')?.concurrency).toBe(3);
    expect(config.tools.get('lookup_order')?.concurrency).toBeUndefined();
    expect(config.agents.get('billing-assistant')?.tools[0]?.concurrency).toBe(3);
    const { message } = await refusal(VALID.replace('agents:', 'tool_concurrency: { refund: 3 }\nagents:'));
    expect(message).toContain('tool_concurrency.refund: there is no tool "refund" to limit');
    const zero = await refusal(VALID.replace('agents:', 'tool_concurrency: { issue_credit: 0 }\nagents:'));
    expect(zero.message).toContain('tool_concurrency.issue_credit');
  });

  it('refuses tools named when no tools module is configured', async () => {
    const { file, message } = await refusal(VALID.replace('tools: ./tools.ts\n', ''));
    expect(message).toContain(
      `${file}:11:13: agents[0].tools[0]: there is no tool "issue_credit"; no tools module is configured`,
    );
  });

  it('refuses duplicate agent names', async () => {
    const { file, message } = await refusal(VALID.replace('name: greeter', 'name: billing-assistant'));
    expect(message).toBe(
      `${file}:15:11: agents[1].name: agent "billing-assistant" is already defined at agents[0]; agent names must be unique`,
    );
  });

  it('refuses a tools module that cannot be imported, or exports no tools', async () => {
    const broken = await refusal(VALID.replace('./tools.ts', './broken-tools.ts'));
    expect(broken.message).toContain(
      `${broken.file}:4:8: tools: cannot import the tools module ${join(dir, 'broken-tools.ts')}`,
    );
    expect(broken.message).toContain('the tools module exploded');
    const missing = await refusal(VALID.replace('./tools.ts', './nope.ts'));
    expect(missing.message).toContain(`${missing.file}:4:8: tools: cannot import the tools module`);
    const empty = await refusal(VALID.replace('./tools.ts', './empty-tools.ts'));
    expect(empty.message).toContain('exports no tools');
  });

  it('refuses an agent that defineAgent refuses', async () => {
    const { file, message } = await refusal(VALID.replace('name: greeter', 'name: "hello world"'));
    expect(message).toContain(`${file}:15:5: agents[1]: agent is not valid: name:`);
  });

  it('names the key variable to set for a model without its key', async () => {
    const text = VALID.replace(
      '{ provider: scripted, script: ./script.json }',
      '{ provider: openai, model: gpt-4o-mini }',
    );
    const { file, message } = await refusal(text, 'MODEL_CONFIG_INVALID');
    expect(message).toContain(
      `${file}:7:14: models.from_file: the openai model "gpt-4o-mini" needs an API key`,
    );
    expect(message).toContain('set the environment variable OPENAI_API_KEY');
    const config = await loadConfig(await configFile(text), { env: { OPENAI_API_KEY: 'sk-test' } });
    expect(config.agents.get('greeter')?.model.modelId).toBe('gpt-4o-mini');
  });

  it('refuses a file that does not exist, or a document that is not a mapping', async () => {
    const error = await loadConfig(join(dir, 'absent.yaml')).catch((e: unknown) => e);
    expect(isOncelyError(error, 'CONFIG_INVALID')).toBe(true);
    expect((error as Error).message).toContain('does not exist');
    const { file, message } = await refusal('- just\n- a list\n');
    expect(message).toBe(`${file}:1:1: expected a mapping, got a list`);
  });
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
