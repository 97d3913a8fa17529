import type { JsonValue } from '../ledger/index.js';

/**
 * The model responses of a loop an application drives itself (an AI SDK `generateText` loop guarded
 * through `oncely/ai-sdk`): one per step of a run, written once, before any tool of it runs.
 */
export interface LoopStep {
  readonly tenantId: string;
  readonly runId: string;
  /** 0 for the run's first model response, then one more for each. */
  readonly step: number;
  /** Digest of the conversation this response answered (system messages left out). */
  readonly promptDigest: string;
  /** The model's response as it was recorded, tool call ids already the ones oncely minted. */
  readonly response: JsonValue;
  readonly modelId: string;
  readonly usage: JsonValue | null;
  readonly createdAt: string;
}

export type NewLoopStep = Omit<LoopStep, 'createdAt'>;

export interface LoopStepStore {
  /**
   * Records a step's response unless the step is recorded already: of any number of processes
   * recording the same step at once, one writes, and every one gets the response that stands.
   */
  record(step: NewLoopStep): Promise<{ readonly recorded: boolean; readonly step: LoopStep }>;
  get(tenantId: string, runId: string, step: number): Promise<LoopStep | undefined>;
  /** The run's steps in order. */
  list(tenantId: string, runId: string): Promise<LoopStep[]>;
}

type Time = string | Date;

export interface LoopStepRow {
  tenant_id: string;
  run_id: string;
  step: number;
  prompt_digest: string;
  response: JsonValue | string;
  model_id: string;
  usage: JsonValue | string | null;
  created_at: Time;
}

const json = (value: JsonValue | string): JsonValue =>
  typeof value === 'string' ? (JSON.parse(value) as JsonValue) : value;

/** A row of either dialect (SQLite keeps JSON as text, PostgreSQL as jsonb). */
export function toLoopStep(row: LoopStepRow): LoopStep {
  return {
    tenantId: row.tenant_id,
    runId: row.run_id,
    step: row.step,
    promptDigest: row.prompt_digest,
    response: json(row.response),
    modelId: row.model_id,
    usage: row.usage === null ? null : json(row.usage),
    createdAt: typeof row.created_at === 'string' ? row.created_at : row.created_at.toISOString(),
  };
}
