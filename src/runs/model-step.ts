import { crashPoint } from '../crash/index.js';
import { OncelyError, errorInfo } from '../errors/index.js';
import type { ErrorInfo } from '../ledger/index.js';
import {
  callModel,
  isTransientModelFailure,
  type ModelPrompt,
  type ModelTurn,
  type ModelUsage,
} from '../models/index.js';
import type { Checkpoint, RunUsage } from '../run-state/index.js';
import type { RunEventInput } from '../store/index.js';
import { SpanKind, definedAttributes, inSpan } from '../tracing/index.js';
import { correctionOwed } from './corrections.js';
import { inSeconds, retryDelay, type DriveEnd } from './drive-end.js';
import { asModelMessages, recordTurn } from './messages.js';
import type { StepDriver } from './step-driver.js';
import { DeltaPublisher, type DeltaBus } from './stream-deltas.js';

/** A model response of a run, as an observer (the metrics) is told of it. */
export interface ModelResponseInfo {
  readonly tenantId: string;
  readonly runId: string;
  readonly agent: string;
  readonly provider: string;
  readonly modelId: string;
  readonly usage: ModelUsage | null;
}

/**
 * The model's response, in the driver's checkpoint but not yet saved: it is saved in the transaction
 * that reserves its calls, or with whatever checkpoint comes next.
 */
export interface UnsavedResponse {
  readonly events: readonly RunEventInput[];
  readonly usage: RunUsage;
}

/**
 * What the model step sees of its driver besides a step's view: the model's side of the drive state
 * (`RunDriver` documents each member).
 */
export interface ModelStepDriver extends StepDriver {
  readonly retryBaseMs: number;
  readonly onModelResponse: ((response: ModelResponseInfo) => void) | undefined;
  readonly prompt: ModelPrompt;
  readonly deltas: DeltaBus | undefined;
  readonly usage: RunUsage;
  readonly lastInputTokens: number;
  readonly modelOutages: number;
  nextStream(): number;
  holdResponse(checkpoint: Checkpoint, unsaved: UnsavedResponse): void;
}

/**
 * One model call, with minted call ids; it is made durable in the transaction that reserves its
 * calls, so never after any of them is reserved.
 */
export async function modelStep(driver: ModelStepDriver): Promise<DriveEnd | undefined> {
  const checkpoint = await corrected(driver, driver.checkpoint);
  const turnSteps = checkpoint.step - driver.run.turnStep;
  if (turnSteps >= driver.agent.maxSteps) {
    const error = new OncelyError(
      'RUN_MAX_STEPS',
      `agent "${driver.agent.name}" made ${turnSteps} model calls without a final answer` +
        `${driver.run.turn > 1 ? ` in turn ${driver.run.turn}` : ''}, its max_steps; ` +
        'raise max_steps or change its instructions',
    );
    return driver.end(undefined, checkpoint, 'failed', { error: error.toJSON(), reason: error.message });
  }
  const overBudget = budgetExceeded(driver);
  if (overBudget !== undefined) {
    return driver.end(undefined, checkpoint, 'failed', {
      error: overBudget.toJSON(),
      reason: overBudget.message,
    });
  }
  await crashPoint('model.before-call');
  let turn: ModelTurn;
  try {
    turn = await callStepModel(driver, checkpoint.step + 1, checkpoint.messages);
  } catch (error) {
    if (driver.lease.lost) return driver.standDown();
    const info = errorInfo(error);
    if (isTransientModelFailure(error)) return modelOutage(driver, checkpoint, info);
    return driver.end(undefined, checkpoint, 'failed', { error: info, reason: info.message });
  }
  await crashPoint('model.after-call');
  tellModelResponse(driver, turn);
  const { message, calls } = recordTurn(turn);
  const usage = responseUsage(turn.usage);
  const step = checkpoint.step + 1;
  const messages = [...checkpoint.messages, message];
  const response = {
    type: 'model.response',
    data: {
      step,
      text: turn.text,
      calls: calls.map((c) => ({ toolCallId: c.toolCallId, toolName: c.toolName })),
      model: { provider: driver.agent.model.provider, id: turn.modelId },
      usage: turn.usage === undefined ? null : { ...turn.usage },
    },
  };
  if (calls.length === 0) {
    return driver.end(undefined, { messages, step, pending: null }, 'completed', {
      result: { text: turn.text },
      events: [response],
      modelAnswered: true,
      usage,
    });
  }
  // Saved with the reservation of its calls (or the next checkpoint), not on its own.
  driver.holdResponse({ messages, step, pending: { calls } }, { events: [response], usage });
  return undefined;
}

/** A transient model failure: wait it out with backoff, up to the agent's budget, then fail. */
async function modelOutage(
  driver: ModelStepDriver,
  checkpoint: Checkpoint,
  info: ErrorInfo,
): Promise<DriveEnd> {
  const outages = driver.modelOutages + 1;
  const budget = driver.agent.modelOutageRetries;
  if (outages > budget) {
    const reason =
      `the model was unavailable ${outages} times in a row (the agent waits out ${budget}); ` +
      `the last time: ${info.message}. Once the provider is back, \`oncely runs retry ${driver.run.runId} --reason "..."\` ` +
      'carries on from the last checkpoint';
    return driver.end(undefined, checkpoint, 'failed', {
      error: { code: info.code, message: reason },
      reason,
    });
  }
  const delayMs = retryDelay(driver.retryBaseMs, outages);
  const reason =
    `the model is unavailable (${outages} of ${budget} waits): ${info.message}; ` +
    `trying the step again in ${inSeconds(delayMs)}`;
  return driver.release(undefined, 'model_outage', delayMs, reason, info);
}

function tellModelResponse(driver: ModelStepDriver, turn: ModelTurn): void {
  try {
    driver.onModelResponse?.({
      tenantId: driver.run.tenantId,
      runId: driver.run.runId,
      agent: driver.agent.name,
      provider: driver.agent.model.provider,
      modelId: turn.modelId,
      usage: turn.usage ?? null,
    });
  } catch {
    // An observer's failure is not the run's.
  }
}

/**
 * The model call of a step, in a span named and labelled as OpenTelemetry's GenAI conventions say
 * (`chat <model>`, the provider, the models asked and answering, token usage, finish reason).
 */
function callStepModel(
  driver: ModelStepDriver,
  step: number,
  messages: Checkpoint['messages'],
): Promise<ModelTurn> {
  const model = driver.agent.model;
  return inSpan(
    `chat ${model.modelId}`,
    {
      kind: SpanKind.CLIENT,
      parent: driver.traceContext,
      attributes: () => ({
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': model.provider,
        'gen_ai.request.model': model.modelId,
        'oncely.run.id': driver.run.runId,
        'oncely.run.step': step,
      }),
    },
    async (span) => {
      const publisher = deltaPublisher(driver, step);
      let turn: ModelTurn;
      try {
        turn = await callModel({
          model,
          system: driver.agent.instructions,
          messages: asModelMessages(messages),
          tools: driver.agent.tools,
          signal: driver.lease.signal,
          timeoutMs: driver.agent.modelTimeoutMs,
          prompt: driver.prompt,
          clock: driver.ledger.clock,
          ...(publisher === undefined ? {} : { onDelta: (delta) => publisher.add(delta) }),
        });
      } finally {
        await publisher?.close();
      }
      if (span.isRecording()) {
        span.setAttributes({
          ...definedAttributes({
            'gen_ai.response.model': turn.modelId,
            'gen_ai.usage.input_tokens': turn.usage?.inputTokens,
            'gen_ai.usage.output_tokens': turn.usage?.outputTokens,
          }),
          'gen_ai.response.finish_reasons': [turn.finishReason],
          'oncely.model.tool_calls': turn.toolCalls.length,
        });
      }
      return turn;
    },
  );
}

/**
 * Where a streaming agent's deltas of this step go (each try of the call a stream of its own, so a
 * client sees the model asked again). Undefined for an agent that does not stream.
 */
function deltaPublisher(driver: ModelStepDriver, step: number): DeltaPublisher | undefined {
  if (!driver.agent.stream) return undefined;
  const wakeups = driver.ledger.store.wakeups;
  return new DeltaPublisher(
    driver.deltas,
    wakeups?.publishDeltas?.bind(wakeups),
    { tenantId: driver.run.tenantId, runId: driver.run.runId, step, epoch: driver.lease.epoch },
    () => driver.nextStream(),
    driver.ledger.clock,
  );
}

/**
 * Why the next model call may not be made: the run's tokens and the least that call adds (its
 * prompt is at least as long as the last one's: a conversation only grows) reach its budget.
 */
function budgetExceeded(driver: ModelStepDriver): OncelyError | undefined {
  const budget = driver.run.tokenBudget;
  if (budget === null) return undefined;
  const used = driver.usage.totalTokens;
  const next = driver.lastInputTokens;
  if (used + next < budget) return undefined;
  return new OncelyError(
    'RUN_BUDGET_EXCEEDED',
    `run ${driver.run.runId} has spent ${used} of its ${budget} tokens, and its next model call would ` +
      `send at least ${next} more (the last call's prompt), passing the budget; the call was not made`,
    { details: { runId: driver.run.runId, budget, used, nextAtLeast: next } },
  );
}

/**
 * The conversation with the correction the model is owed, if any (a call it was told did not take
 * effect, whose effect then landed): saved with whatever this step saves next.
 */
async function corrected(driver: ModelStepDriver, checkpoint: Checkpoint): Promise<Checkpoint> {
  const { tenantId, runId } = driver.run;
  const correction = await correctionOwed(driver.ledger, tenantId, runId, checkpoint.messages);
  return correction === undefined
    ? checkpoint
    : { ...checkpoint, messages: [...checkpoint.messages, correction] };
}

/** A response's usage as the run counts it (what the provider did not report counts 0). */
function responseUsage(usage: ModelTurn['usage']): RunUsage {
  const inputTokens = usage?.inputTokens ?? 0;
  const outputTokens = usage?.outputTokens ?? 0;
  return {
    inputTokens,
    outputTokens,
    reasoningTokens: usage?.reasoningTokens ?? 0,
    cachedInputTokens: usage?.cachedInputTokens ?? 0,
    totalTokens: usage?.totalTokens ?? inputTokens + outputTokens,
  };
}
