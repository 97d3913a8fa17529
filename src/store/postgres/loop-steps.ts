import { GET, LIST, RECORD } from '../loop-steps-sql.js';
import {
  toLoopStep,
  type LoopStep,
  type LoopStepRow,
  type LoopStepStore,
  type NewLoopStep,
} from '../loop-step-store.js';
import type { Queryable } from './ledger.js';

/** Loop steps on PostgreSQL; each method is one statement (a record that met its step, two). */
export class PostgresLoopSteps implements LoopStepStore {
  constructor(private readonly db: Queryable) {}

  async record(step: NewLoopStep): Promise<{ recorded: boolean; step: LoopStep }> {
    const { rows } = await this.db.query<LoopStepRow>(RECORD.postgres, [
      step.tenantId,
      step.runId,
      step.step,
      step.promptDigest,
      JSON.stringify(step.response),
      step.modelId,
      step.usage === null ? null : JSON.stringify(step.usage),
    ]);
    if (rows[0] !== undefined) return { recorded: true, step: toLoopStep(rows[0]) };
    const standing = await this.get(step.tenantId, step.runId, step.step);
    if (standing === undefined)
      throw new Error(`loop step ${step.runId}#${step.step} was neither written nor found`);
    return { recorded: false, step: standing };
  }

  async get(tenantId: string, runId: string, step: number): Promise<LoopStep | undefined> {
    const { rows } = await this.db.query<LoopStepRow>(GET.postgres, [tenantId, runId, step]);
    return rows[0] === undefined ? undefined : toLoopStep(rows[0]);
  }

  async list(tenantId: string, runId: string): Promise<LoopStep[]> {
    const { rows } = await this.db.query<LoopStepRow>(LIST.postgres, [tenantId, runId]);
    return rows.map(toLoopStep);
  }
}
