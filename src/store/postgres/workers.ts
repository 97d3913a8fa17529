import {
  DEFAULT_SHOWN_MS,
  toWorkerView,
  type WorkerBeat,
  type WorkerRow,
  type WorkerStore,
  type WorkerView,
} from '../worker-store.js';
import { HEARTBEAT, LIST, REMOVE } from '../workers-sql.js';
import type { Queryable } from './ledger.js';

/** The worker registry on PostgreSQL; each method is one statement. */
export class PostgresWorkers implements WorkerStore {
  constructor(private readonly db: Queryable) {}

  async heartbeat(beat: WorkerBeat): Promise<void> {
    await this.db.query(HEARTBEAT.postgres, [
      beat.workerId,
      beat.kind,
      beat.host,
      beat.pid,
      beat.concurrency,
      beat.version,
      beat.stopping,
    ]);
  }

  async remove(workerId: string): Promise<void> {
    await this.db.query(REMOVE.postgres, [workerId]);
  }

  async list(tenantId: string, options: { liveMs: number; shownMs?: number }): Promise<WorkerView[]> {
    const { rows } = await this.db.query<WorkerRow>(LIST.postgres, [
      tenantId,
      options.liveMs,
      options.shownMs ?? DEFAULT_SHOWN_MS,
    ]);
    return rows.map(toWorkerView);
  }
}
