import type Database from 'better-sqlite3';
import type { ToolSlotStore } from '../tool-slot-store.js';
import { ACQUIRE, HELD, RELEASE, RENEW } from '../tool-slots-sql.js';
import type { Clock } from '../../util/clock.js';
import { settle } from './settle.js';

const iso = (ms: number): string => new Date(ms).toISOString();

/** Tool slots on one better-sqlite3 connection; each method is one statement (the store's write lock). */
export class SqliteToolSlots implements ToolSlotStore {
  constructor(
    private readonly db: Database.Database,
    private readonly clock: Clock,
  ) {}

  acquire(tool: string, limit: number, holder: string, leaseMs: number): Promise<number | undefined> {
    return settle(() => {
      const now = this.clock.now();
      const row = this.db
        .prepare<[Record<string, unknown>], { slot: number }>(ACQUIRE.sqlite)
        .get({ tool, limit, holder, now: iso(now), expiresAt: iso(now + leaseMs) });
      return row?.slot;
    });
  }

  renew(tool: string, slot: number, holder: string, leaseMs: number): Promise<boolean> {
    return settle(() => {
      const now = this.clock.now();
      const row = this.db
        .prepare<[Record<string, unknown>], { slot: number }>(RENEW.sqlite)
        .get({ tool, slot, holder, now: iso(now), expiresAt: iso(now + leaseMs) });
      return row !== undefined;
    });
  }

  release(tool: string, slot: number, holder: string, heldForMs: number): Promise<void> {
    return settle(() => {
      this.db
        .prepare(RELEASE.sqlite)
        .run({ tool, slot, holder, expiresAt: iso(this.clock.now() + Math.max(0, heldForMs)) });
    });
  }

  held(tool: string): Promise<{ slot: number; holder: string; expiresAt: string }[]> {
    return settle(() =>
      this.db
        .prepare<[string, string], { slot: number; holder: string; expires_at: string }>(HELD.sqlite)
        .all(tool, iso(this.clock.now()))
        .map((r) => ({ slot: r.slot, holder: r.holder, expiresAt: r.expires_at })),
    );
  }
}
