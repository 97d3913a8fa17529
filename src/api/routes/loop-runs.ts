import { z } from 'zod/v4';
import { OncelyError } from '../../errors/index.js';
import { frameworkOf, loopTurn, type LoopPart } from '../../frameworks/loop-conversation.js';
import { isUnknownStatus } from '../../ledger/index.js';
import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { toToolExecution } from '../present.js';
import { authErrors } from '../schemas/common.js';
import { loopRunIdSchema, loopRunSchema } from '../schemas/loop-runs.js';

/*
 * A run of an application's own loop (`oncely/ai-sdk`, `oncely/openai-agents`, or calls made with
 * `executeToolCall` under a run id): no row in `runs` (oncely does not drive it), but its recorded
 * model responses (`loop_steps`) and its calls in the ledger. Read for the console's run page.
 */

const CALLS = 500;

export function loopRunRoutes(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/loop-runs/:run_id',
    {
      config: { role: 'viewer' },
      schema: {
        summary: "A run of an application's own loop: its recorded model responses and its calls",
        description:
          'For runs oncely does not drive (durableLoop, durableAgentRun, executeToolCall): the recorded ' +
          'responses as a conversation (text, reasoning, tool calls with their keys) and the calls in the ' +
          'ledger. 404 RUN_NOT_FOUND when the tenant has neither under this run id.',
        tags: ['runs'],
        security: BEARER,
        params: z.strictObject({ run_id: loopRunIdSchema }),
        response: { 200: loopRunSchema, ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const { run_id: runId } = request.params;
      const [steps, calls] = await Promise.all([
        ctx.store.loopSteps.list(tenantId, runId),
        ctx.store.ledger.list(tenantId, { runId, limit: CALLS }),
      ]);
      if (steps.length === 0 && calls.length === 0) {
        throw new OncelyError(
          'RUN_NOT_FOUND',
          `no run ${runId} in this tenant: no model response of a loop is recorded under it and no call was made under it`,
          { details: { runId } },
        );
      }
      const keys = new Set(calls.map((c) => c.idempotencyKey));
      const times = [
        ...steps.map((s) => s.createdAt),
        ...calls.flatMap((c) => [c.createdAt, c.updatedAt]),
      ].sort();
      return {
        tenant_id: tenantId,
        run_id: runId,
        framework: steps[0] === undefined ? null : frameworkOf(steps[0]),
        steps: steps.map((s) => {
          const turn = loopTurn(s);
          return {
            step: turn.step,
            framework: turn.framework,
            model_id: turn.modelId,
            created_at: turn.createdAt,
            usage:
              turn.usage === null
                ? null
                : {
                    input_tokens: turn.usage.inputTokens,
                    output_tokens: turn.usage.outputTokens,
                    total_tokens: turn.usage.totalTokens,
                  },
            parts: turn.parts.map((p) => presentPart(p, runId, keys)),
          };
        }),
        calls: calls.map(toToolExecution),
        unknown_calls: calls.filter((c) => isUnknownStatus(c.status)).length,
        created_at: times[0] ?? new Date(0).toISOString(),
        updated_at: times.at(-1) ?? new Date(0).toISOString(),
      };
    },
  );
}

function presentPart(part: LoopPart, runId: string, keys: ReadonlySet<string>) {
  if (part.type !== 'tool-call') return part;
  const key = `${runId}:${part.toolCallId}`;
  return {
    type: part.type,
    tool_call_id: part.toolCallId,
    tool_name: part.toolName,
    input: part.input,
    provider_executed: part.providerExecuted,
    idempotency_key: keys.has(key) ? key : null,
  };
}
