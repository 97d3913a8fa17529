import type Database from 'better-sqlite3';
import { GET, LIST, RECORD } from '../loop-steps-sql.js';
import {
  toLoopStep,
  type LoopStep,
  type LoopStepRow,
  type LoopStepStore,
  type NewLoopStep,
} from '../loop-step-store.js';
import { isoNow, type Clock } from '../../util/clock.js';
import { settle } from './settle.js';

/** Loop steps on one better-sqlite3 connection; a record is one transaction (the store's write lock). */
export class SqliteLoopSteps implements LoopStepStore {
  constructor(
    private readonly db: Database.Database,
    private readonly clock: Clock,
  ) {}

  record(step: NewLoopStep): Promise<{ recorded: boolean; step: LoopStep }> {
    return settle(() => {
      const row = this.db.prepare<[Record<string, unknown>], LoopStepRow>(RECORD.sqlite).get({
        tenantId: step.tenantId,
        runId: step.runId,
        step: step.step,
        promptDigest: step.promptDigest,
        response: JSON.stringify(step.response),
        modelId: step.modelId,
        usage: step.usage === null ? null : JSON.stringify(step.usage),
        at: isoNow(this.clock),
      });
      if (row !== undefined) return { recorded: true, step: toLoopStep(row) };
      const standing = this.getSync(step.tenantId, step.runId, step.step);
      if (standing === undefined)
        throw new Error(`loop step ${step.runId}#${step.step} was neither written nor found`);
      return { recorded: false, step: standing };
    });
  }

  get(tenantId: string, runId: string, step: number): Promise<LoopStep | undefined> {
    return settle(() => this.getSync(tenantId, runId, step));
  }

  list(tenantId: string, runId: string): Promise<LoopStep[]> {
    return settle(() =>
      this.db.prepare<[string, string], LoopStepRow>(LIST.sqlite).all(tenantId, runId).map(toLoopStep),
    );
  }

  private getSync(tenantId: string, runId: string, step: number): LoopStep | undefined {
    const row = this.db.prepare<[string, string, number], LoopStepRow>(GET.sqlite).get(tenantId, runId, step);
    return row === undefined ? undefined : toLoopStep(row);
  }
}
