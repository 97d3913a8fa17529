import type { ToolSlotStore } from '../tool-slot-store.js';
import { ACQUIRE, HELD, RELEASE, RENEW } from '../tool-slots-sql.js';
import type { Queryable } from './ledger.js';

/** Tool slots on PostgreSQL; each method is one statement. */
export class PostgresToolSlots implements ToolSlotStore {
  constructor(private readonly db: Queryable) {}

  async acquire(tool: string, limit: number, holder: string, leaseMs: number): Promise<number | undefined> {
    const { rows } = await this.db.query<{ slot: number }>(ACQUIRE.postgres, [tool, holder, limit, leaseMs]);
    return rows[0]?.slot;
  }

  async renew(tool: string, slot: number, holder: string, leaseMs: number): Promise<boolean> {
    const { rows } = await this.db.query<{ slot: number }>(RENEW.postgres, [tool, slot, holder, leaseMs]);
    return rows.length === 1;
  }

  async release(tool: string, slot: number, holder: string, heldForMs: number): Promise<void> {
    await this.db.query(RELEASE.postgres, [tool, slot, holder, Math.max(0, heldForMs)]);
  }

  async held(tool: string): Promise<{ slot: number; holder: string; expiresAt: string }[]> {
    const { rows } = await this.db.query<{ slot: number; holder: string; expires_at: Date | string }>(
      HELD.postgres,
      [tool],
    );
    return rows.map((r) => ({
      slot: r.slot,
      holder: r.holder,
      expiresAt: new Date(r.expires_at).toISOString(),
    }));
  }
}
