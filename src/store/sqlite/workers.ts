import type Database from 'better-sqlite3';
import {
  DEFAULT_SHOWN_MS,
  toWorkerView,
  type WorkerBeat,
  type WorkerRow,
  type WorkerStore,
  type WorkerView,
} from '../worker-store.js';
import { FORGET, FORGET_AFTER_MS, HEARTBEAT, LIST, REMOVE } from '../workers-sql.js';
import { isoNow, type Clock } from '../../util/clock.js';
import { settle } from './settle.js';

/** The worker registry on one better-sqlite3 connection; a heartbeat is one transaction. */
export class SqliteWorkers implements WorkerStore {
  constructor(
    private readonly db: Database.Database,
    private readonly clock: Clock,
  ) {}

  private ago(ms: number): string {
    return new Date(this.clock.now() - ms).toISOString();
  }

  heartbeat(beat: WorkerBeat): Promise<void> {
    return settle(() => {
      this.db.transaction(() => {
        this.db.prepare(FORGET.sqlite).run(this.ago(FORGET_AFTER_MS));
        this.db.prepare(HEARTBEAT.sqlite).run({
          ...beat,
          stopping: beat.stopping ? 1 : 0,
          at: isoNow(this.clock),
        });
      })();
    });
  }

  remove(workerId: string): Promise<void> {
    return settle(() => {
      this.db.prepare(REMOVE.sqlite).run(workerId);
    });
  }

  list(tenantId: string, options: { liveMs: number; shownMs?: number }): Promise<WorkerView[]> {
    return settle(() =>
      this.db
        .prepare<[Record<string, unknown>], WorkerRow>(LIST.sqlite)
        .all({
          tenantId,
          now: isoNow(this.clock),
          liveSince: this.ago(options.liveMs),
          shownSince: this.ago(options.shownMs ?? DEFAULT_SHOWN_MS),
        })
        .map(toWorkerView),
    );
  }
}
