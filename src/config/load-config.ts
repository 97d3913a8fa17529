import { readFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import type { OncelyLanguageModel } from '../models/ai-runtime.js';
import { defineAgent, type Agent } from '../agents/index.js';
import { isOncelyError, OncelyError } from '../errors/index.js';
import { createModel, type ModelConfig } from '../models/index.js';
import type { Tool } from '../tools/index.js';
import { configDocumentSchema, type ConfigDocument } from './config-schema.js';
import type { ConfigSource, ConfigProblem } from './config-source.js';
import { DEFAULT_TOOLS_IMPORT_TIMEOUT_MS, loadToolsModule } from './load-tools.js';
import { connectMcpServers, isMcpServerProblem, type McpServers } from './mcp-servers.js';
import { problemsOf } from './schema-issues.js';
import { defineWorkflow, recoveryProblems, type Workflow } from '../workflows/define-workflow.js';
import { templateFunction, templateProblems, whenFunction } from '../workflows/templates.js';
import type { WorkflowDocument } from './config-schema.js';

type Env = Readonly<Record<string, string | undefined>>;

/** `oncely.yaml`, resolved: agents built with their models and tools. */
export interface OncelyConfig {
  /** The configuration file, absolute. */
  readonly path: string;
  /** `ONCELY_DATABASE_URL` if set, else `storage.database_url`; unset means the embedded default. */
  readonly databaseUrl?: string;
  readonly agents: Map<string, Agent>;
  /** Every tool the tools module exports, and every tool of its MCP servers (`<prefix><tool>`), by name. */
  readonly tools: Map<string, Tool>;
  /**
   * `workflows:`, by name, checked against the agents: a node with `recovery_policy: retry` whose
   * agent can call a tool that is neither a read() nor has a reconcile hook is refused here.
   */
  readonly workflows: Map<string, Workflow>;
  /** `runtime:`: drive attempts, attempts per call, the landing margin (unset: the defaults). */
  readonly runtime: {
    readonly maxDriveAttempts?: number;
    readonly maxAttemptsPerCall?: number;
    readonly landingMarginMs?: number;
  };
  /** Closes the connections to its MCP servers (and stops those it started); nothing else to close. */
  close(): Promise<void>;
}

export interface LoadConfigOptions {
  /**
   * Where `ONCELY_DATABASE_URL`, `ONCELY_TOOLS_IMPORT_TIMEOUT_MS` (how long importing the tools module
   * may take; default 30000) and model keys are read; default `process.env`.
   */
  readonly env?: Env;
}

/**
 * Loads and checks `oncely.yaml`. Every problem is a `CONFIG_INVALID` naming the file, the path in
 * the document, its line and column, and what was expected; a model whose key is not set is a
 * `MODEL_CONFIG_INVALID` naming the variable to set.
 *
 * @example
 * const config = await loadConfig('oncely.yaml');
 * const agent = config.agents.get('billing-assistant');
 */
export async function loadConfig(path: string, options: LoadConfigOptions = {}): Promise<OncelyConfig> {
  const env = options.env ?? process.env;
  const file = resolve(path);
  const text = await readText(path, file);
  // The YAML parser is loaded with the first configuration read, not with the package.
  const { ConfigSource } = await import('./config-source.js');
  const source = ConfigSource.parse(path, text);
  const value: unknown = source.value() ?? {};
  const parsed = configDocumentSchema.safeParse(value);
  if (!parsed.success) throw source.error(problemsOf(parsed.error, configDocumentSchema, value));
  const doc = parsed.data;
  const timeoutMs = importTimeoutMs(env);
  const moduleTools = await loadTools(source, doc, dirname(file), timeoutMs);
  const mcp = await mcpServers(source, doc, env, dirname(file), timeoutMs);
  try {
    const tools = withConcurrency(new Map([...moduleTools, ...mcp.tools]), doc.tool_concurrency ?? {});
    const problems = [
      ...collisions(moduleTools, mcp.tools),
      ...referenceProblems(doc, tools),
      ...concurrencyProblems(doc, tools),
    ];
    if (problems.length > 0) throw source.error(problems);
    const models = await createModels(source, doc, env, dirname(file));
    const agents = buildAgents(source, doc, models, tools);
    const workflows = buildWorkflows(source, doc, agents);
    const databaseUrl = nonEmpty(env.ONCELY_DATABASE_URL) ?? doc.storage?.database_url;
    const r = doc.runtime ?? {};
    const runtime = {
      ...(r.max_drive_attempts === undefined ? {} : { maxDriveAttempts: r.max_drive_attempts }),
      ...(r.max_attempts_per_call === undefined ? {} : { maxAttemptsPerCall: r.max_attempts_per_call }),
      ...(r.landing_margin_ms === undefined ? {} : { landingMarginMs: r.landing_margin_ms }),
      ...(r.tool_slot_lease_ms === undefined ? {} : { toolSlotLeaseMs: r.tool_slot_lease_ms }),
    };
    return {
      path: file,
      ...(databaseUrl === undefined ? {} : { databaseUrl }),
      agents,
      tools,
      workflows,
      runtime,
      close: () => mcp.close(),
    };
  } catch (error) {
    await mcp.close();
    throw error;
  }
}

async function mcpServers(
  source: ConfigSource,
  doc: ConfigDocument,
  env: Env,
  baseDir: string,
  timeoutMs: number,
): Promise<McpServers> {
  try {
    return await connectMcpServers(doc, env, baseDir, timeoutMs);
  } catch (cause) {
    if (!isMcpServerProblem(cause)) throw cause;
    const error = source.error([cause.problem]);
    throw new OncelyError(error.code, error.message, {
      cause: cause.cause ?? cause,
      details: { ...error.details },
    });
  }
}

/** An MCP server's tool named like one of the tools module's. */
function collisions(moduleTools: Map<string, Tool>, mcpTools: Map<string, Tool>): ConfigProblem[] {
  return [...mcpTools.keys()]
    .filter((name) => moduleTools.has(name))
    .map((name) => ({
      path: ['mcp_servers'],
      message: `an MCP server's tool is named "${name}", as a tool of the tools module is; give the server another prefix`,
    }));
}

async function readText(shown: string, file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (cause) {
    const reason = (cause as { code?: unknown }).code === 'ENOENT' ? 'it does not exist' : String(cause);
    throw new OncelyError(
      'CONFIG_INVALID',
      `cannot read the configuration file ${shown} (${file}): ${reason}`,
      {
        cause,
      },
    );
  }
}

async function loadTools(
  source: ConfigSource,
  doc: ConfigDocument,
  baseDir: string,
  timeoutMs: number,
): Promise<Map<string, Tool>> {
  if (doc.tools === undefined) return new Map();
  const result = await loadToolsModule(resolve(baseDir, doc.tools), { timeoutMs });
  if (result.ok) return result.tools;
  const error = source.error([{ path: ['tools'], message: result.reason }]);
  throw new OncelyError(error.code, error.message, { cause: result.cause, details: { ...error.details } });
}

/** `ONCELY_TOOLS_IMPORT_TIMEOUT_MS`, whole milliseconds above 0; unset: 30 s. */
function importTimeoutMs(env: Env): number {
  const text = nonEmpty(env.ONCELY_TOOLS_IMPORT_TIMEOUT_MS);
  if (text === undefined) return DEFAULT_TOOLS_IMPORT_TIMEOUT_MS;
  const ms = Number(text);
  if (!Number.isInteger(ms) || ms < 1) {
    throw new OncelyError(
      'CONFIG_INVALID',
      `ONCELY_TOOLS_IMPORT_TIMEOUT_MS is ${JSON.stringify(text)}; set it to whole milliseconds above 0 ` +
        `(or unset it: ${DEFAULT_TOOLS_IMPORT_TIMEOUT_MS})`,
    );
  }
  return ms;
}

/** The tools with the limits `tool_concurrency` sets (it wins over a tool's own `concurrency`). */
function withConcurrency(tools: Map<string, Tool>, limits: Record<string, number>): Map<string, Tool> {
  const limited = new Map(tools);
  for (const [name, concurrency] of Object.entries(limits)) {
    const tool = tools.get(name);
    if (tool !== undefined) limited.set(name, Object.freeze({ ...tool, concurrency }));
  }
  return limited;
}

/** `tool_concurrency` naming a tool that does not exist. */
function concurrencyProblems(doc: ConfigDocument, tools: Map<string, Tool>): ConfigProblem[] {
  return Object.keys(doc.tool_concurrency ?? {})
    .filter((name) => !tools.has(name))
    .map((name) => ({
      path: ['tool_concurrency', name],
      message: `there is no tool "${name}" to limit; the tools are: ${[...tools.keys()].join(', ') || '(none)'}`,
    }));
}

/** Agents naming models or tools that do not exist, and agent names used twice. */
function referenceProblems(doc: ConfigDocument, tools: Map<string, Tool>): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const modelNames = Object.keys(doc.models ?? {});
  const firstIndex = new Map<string, number>();
  (doc.agents ?? []).forEach((agent, i) => {
    const first = firstIndex.get(agent.name);
    if (first !== undefined) {
      problems.push({
        path: ['agents', i, 'name'],
        message: `agent "${agent.name}" is already defined at agents[${first}]; agent names must be unique`,
      });
    } else {
      firstIndex.set(agent.name, i);
    }
    if (!modelNames.includes(agent.model)) {
      const known =
        modelNames.length > 0
          ? `the models are: ${modelNames.join(', ')}`
          : 'no models are defined; add one under models:';
      problems.push({
        path: ['agents', i, 'model'],
        message: `there is no model "${agent.model}"; ${known}`,
      });
    }
    (agent.tools ?? []).forEach((name, j) => {
      if (tools.has(name)) return;
      const known =
        doc.tools === undefined && doc.mcp_servers === undefined
          ? 'no tools module is configured; add `tools: ./tools.js`'
          : doc.mcp_servers === undefined
            ? `the tools module ${doc.tools} exports: ${[...tools.keys()].join(', ')}`
            : `the tools are: ${[...tools.keys()].join(', ')}`;
      problems.push({ path: ['agents', i, 'tools', j], message: `there is no tool "${name}"; ${known}` });
    });
  });
  return problems;
}

async function createModels(
  source: ConfigSource,
  doc: ConfigDocument,
  env: Env,
  baseDir: string,
): Promise<Map<string, OncelyLanguageModel>> {
  const models = new Map<string, OncelyLanguageModel>();
  for (const [key, config] of Object.entries(doc.models ?? {})) {
    try {
      models.set(key, await createModel(config, env, { baseDir }));
    } catch (cause) {
      if (!isOncelyError(cause, 'MODEL_CONFIG_INVALID')) throw cause;
      const error = source.error([{ path: ['models', key], message: cause.message }], 'MODEL_CONFIG_INVALID');
      throw new OncelyError(error.code, error.message, {
        cause,
        details: { ...error.details, ...cause.details },
      });
    }
  }
  return models;
}

function buildAgents(
  source: ConfigSource,
  doc: ConfigDocument,
  models: Map<string, OncelyLanguageModel>,
  tools: Map<string, Tool>,
): Map<string, Agent> {
  const agents = new Map<string, Agent>();
  const problems: ConfigProblem[] = [];
  (doc.agents ?? []).forEach((agent, i) => {
    try {
      const onIndeterminate = agent.tool_policy?.on_indeterminate;
      const onRepeat = agent.tool_policy?.on_repeat;
      agents.set(
        agent.name,
        defineAgent({
          name: agent.name,
          instructions: agent.instructions,
          model: models.get(agent.model) as OncelyLanguageModel, // checked by referenceProblems
          tools: (agent.tools ?? []).map((name) => tools.get(name) as Tool),
          toolPolicy: {
            ...(onIndeterminate === undefined ? {} : { onIndeterminate }),
            ...(onRepeat === undefined ? {} : { onRepeat }),
          },
          ...(agent.max_steps === undefined ? {} : { maxSteps: agent.max_steps }),
          ...(agent.token_budget === undefined ? {} : { tokenBudget: agent.token_budget }),
          ...(agent.stream === undefined ? {} : { stream: agent.stream }),
          ...modelTimeout(agent.model_timeout_ms, doc.models?.[agent.model]),
          ...(agent.model_outage_retries === undefined
            ? {}
            : { modelOutageRetries: agent.model_outage_retries }),
        }),
      );
    } catch (cause) {
      if (!isOncelyError(cause, 'AGENT_DEFINITION_INVALID')) throw cause;
      problems.push({ path: ['agents', i], message: cause.message });
    }
  });
  if (problems.length > 0) throw source.error(problems);
  return agents;
}

/** `workflows:` made into workflows; every problem of every workflow in one CONFIG_INVALID. */
function buildWorkflows(
  source: ConfigSource,
  doc: ConfigDocument,
  agents: Map<string, Agent>,
): Map<string, Workflow> {
  const workflows = new Map<string, Workflow>();
  const problems: ConfigProblem[] = [];
  (doc.workflows ?? []).forEach((w, i) => {
    const at = (...path: PropertyKey[]): PropertyKey[] => ['workflows', i, ...path];
    if (workflows.has(w.name)) {
      problems.push({
        path: at('name'),
        message: `workflow "${w.name}" is defined twice; names must be unique`,
      });
      return;
    }
    const local = workflowDocumentProblems(w).map((p) => ({ path: at(...p.path), message: p.message }));
    if (local.length > 0) {
      problems.push(...local);
      return;
    }
    try {
      const workflow = defineWorkflow(workflowOf(w, `workflows[${i}]`));
      for (const message of recoveryProblems(workflow, agents)) problems.push({ path: at('nodes'), message });
      workflows.set(w.name, workflow);
    } catch (cause) {
      if (!isOncelyError(cause, 'WORKFLOW_DEFINITION_INVALID')) throw cause;
      problems.push({ path: at(), message: cause.message });
    }
  });
  if (problems.length > 0) throw source.error(problems);
  return workflows;
}

/** Templates that do not parse, conditions on nodes a node does not need, bad regular expressions. */
function workflowDocumentProblems(w: WorkflowDocument): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const message of templateProblems(w.result)) problems.push({ path: ['result'], message });
  for (const [name, node] of Object.entries(w.nodes)) {
    for (const message of templateProblems(node.input))
      problems.push({ path: ['nodes', name, 'input'], message });
    if (node.when === undefined) continue;
    if (!(node.needs ?? []).includes(node.when.node)) {
      problems.push({
        path: ['nodes', name, 'when', 'node'],
        message: `a condition is on a node this node needs; add "${node.when.node}" to its needs`,
      });
    }
    if (node.when.matches !== undefined) {
      try {
        new RegExp(node.when.matches);
      } catch (cause) {
        problems.push({ path: ['nodes', name, 'when', 'matches'], message: String(cause) });
      }
    }
  }
  return problems;
}

function workflowOf(w: WorkflowDocument, definedAt: string): Parameters<typeof defineWorkflow>[0] {
  return {
    name: w.name,
    definedAt,
    ...(w.input_schema === undefined ? {} : { input: w.input_schema as { type: 'object' } }),
    ...(w.result === undefined ? {} : { result: templateFunction(w.result) }),
    nodes: Object.fromEntries(
      Object.entries(w.nodes).map(([name, n]) => [
        name,
        {
          agent: n.agent,
          ...(n.needs === undefined ? {} : { needs: n.needs }),
          ...(n.input === undefined ? {} : { input: templateFunction(n.input) }),
          ...(n.when === undefined ? {} : { when: whenFunction(n.when) }),
          ...(n.recovery_policy === undefined ? {} : { recoveryPolicy: n.recovery_policy }),
          ...(n.max_attempts === undefined ? {} : { maxAttempts: n.max_attempts }),
          ...(n.backoff_ms === undefined ? {} : { backoffMs: n.backoff_ms }),
        },
      ]),
    ),
  };
}

/** The agent's model_timeout_ms, else its model's timeout_ms, else the default. */
function modelTimeout(own: number | undefined, model: ModelConfig | undefined): { modelTimeoutMs?: number } {
  const fromModel = model !== undefined && 'timeout_ms' in model ? model.timeout_ms : undefined;
  const ms = own ?? fromModel;
  return ms === undefined ? {} : { modelTimeoutMs: ms };
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value;
}
