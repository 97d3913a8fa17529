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
import { settle } from './settle.js';

const ago = (ms: number): string => new Date(Date.now() - ms).toISOString();

/** The worker registry on one better-sqlite3 connection; a heartbeat is one transaction. */
export class SqliteWorkers implements WorkerStore {
  constructor(private readonly db: Database.Database) {}

  heartbeat(beat: WorkerBeat): Promise<void> {
    return settle(() => {
      this.db.transaction(() => {
        this.db.prepare(FORGET.sqlite).run(ago(FORGET_AFTER_MS));
        this.db.prepare(HEARTBEAT.sqlite).run({
          ...beat,
          stopping: beat.stopping ? 1 : 0,
          at: new Date().toISOString(),
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
          now: new Date().toISOString(),
          liveSince: ago(options.liveMs),
          shownSince: ago(options.shownMs ?? DEFAULT_SHOWN_MS),
        })
        .map(toWorkerView),
    );
  }
}
