import { ToolContractError, ToolNotAttemptedError, errorInfo } from '../errors/index.js';
import { effectProblem, isTool, type Tool, type ToolContext } from '../tools/index.js';

export interface ToolContractOptions {
  /**
   * Arguments for one sample execution, run against whatever fake downstream your test wires up.
   * Needed for a tool that changes something: the check watches whether it reads its key.
   */
  readonly args?: unknown;
  readonly tenantId?: string;
  readonly runId?: string;
  readonly toolCallId?: string;
}

export interface ToolContractReport {
  readonly tool: string;
  readonly effect: string;
  readonly executed: boolean;
  readonly readIdempotencyKey: boolean;
}

/**
 * Fails (throws `ToolContractError`) for a tool that writes, sends or deletes and is allowed more
 * than one attempt, or that never reads `context.idempotencyKey` when executed, unless it declares
 * `downstreamAcceptsKey: false` and has a reconcile hook. Works under vitest, node:test or any
 * runner that fails a test on a rejected promise.
 *
 * @example
 * test('issue_credit keeps the contract', async () => {
 *   await assertToolContract(issueCredit, { args: { accountId: 'acct_1', amountCents: 2500 } });
 * });
 */
export async function assertToolContract(
  tool: unknown,
  options: ToolContractOptions = {},
): Promise<ToolContractReport> {
  if (!isTool(tool)) {
    throw new ToolContractError(nameOf(tool), [
      'it is not an oncely tool; define it with defineTool({ ... })',
    ]);
  }
  const problems: string[] = [];
  const effectIssue = effectProblem(tool.effect);
  if (effectIssue !== undefined)
    problems.push(`effect: ${effectIssue}; declare it with read(), write(), external() or destructive()`);
  const changesSomething = tool.effect.kind !== 'read';
  if (changesSomething && !tool.downstreamAcceptsKey && tool.reconcile === undefined) {
    problems.push(
      'it declares downstreamAcceptsKey: false, so nothing downstream can recognise a repeat; add a reconcile ' +
        'hook that looks the call up (store the key in a reference or metadata field you can search)',
    );
  }
  let executed = false;
  let readKey = false;
  if (changesSomething) {
    if (options.args === undefined) {
      problems.push(
        'pass args: { ... } so the check can run the tool once and see that it reads context.idempotencyKey',
      );
    } else {
      const sample = await sampleExecution(tool, options);
      executed = sample.executed;
      readKey = sample.readKey;
      if (sample.problem !== undefined) problems.push(sample.problem);
      else if (!readKey && tool.downstreamAcceptsKey) {
        problems.push(
          'it never read context.idempotencyKey; pass it to the system it changes (an Idempotency-Key header, ' +
            'a request id), or, if that system cannot take one, declare downstreamAcceptsKey: false and add a reconcile hook',
        );
      }
    }
  }
  if (problems.length > 0) throw new ToolContractError(tool.name, problems);
  return { tool: tool.name, effect: tool.effect.kind, executed, readIdempotencyKey: readKey };
}

async function sampleExecution(
  tool: Tool,
  options: ToolContractOptions,
): Promise<{ executed: boolean; readKey: boolean; problem?: string }> {
  const parsed = tool.inputSchema.check(options.args);
  if (!parsed.ok) {
    return {
      executed: false,
      readKey: false,
      problem: `the sample args do not match the input schema: ${parsed.problems.join('; ')}`,
    };
  }
  let readKey = false;
  const runId = options.runId ?? 'contract_run';
  const toolCallId = options.toolCallId ?? 'contract_call';
  const context: ToolContext = {
    get idempotencyKey() {
      readKey = true;
      return `${runId}:${toolCallId}`;
    },
    runId,
    toolCallId,
    tenantId: options.tenantId ?? 'contract_tenant',
    attempt: 1,
    retry: 0,
    signal: AbortSignal.timeout(tool.timeoutMs),
  };
  try {
    await tool.execute(parsed.value, context);
    return { executed: true, readKey };
  } catch (error) {
    if (error instanceof ToolNotAttemptedError) return { executed: true, readKey };
    return {
      executed: true,
      readKey,
      problem: `the sample execution threw ${errorInfo(error).message}; give it args and a fake downstream under which it succeeds`,
    };
  }
}

function nameOf(value: unknown): string {
  const name = (value as { name?: unknown } | null)?.name;
  return typeof name === 'string' ? name : '(not a tool)';
}
