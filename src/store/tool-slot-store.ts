/**
 * Cluster-wide limits on a tool's concurrent calls: slot n (of the tool's `concurrency`) is held by one
 * call at a time, under a lease its holder renews; a crashed holder's slot comes back when the lease
 * expires. Every method is one atomic statement.
 */
export interface ToolSlotStore {
  /** Takes a free slot of `tool` (0 … limit - 1) for `holder`, for `leaseMs`; undefined when all are held. */
  acquire(tool: string, limit: number, holder: string, leaseMs: number): Promise<number | undefined>;
  /** Extends the lease of a slot this holder holds; false when it lost it (the lease expired). */
  renew(tool: string, slot: number, holder: string, leaseMs: number): Promise<boolean>;
  /**
   * Lets go of the slot: free at once (`heldForMs` 0), or still held for `heldForMs` (a call whose
   * request may still reach the downstream keeps its slot until its attempt can no longer land).
   */
  release(tool: string, slot: number, holder: string, heldForMs: number): Promise<void>;
  /** The slots of `tool` held now. */
  held(tool: string): Promise<{ slot: number; holder: string; expiresAt: string }[]>;
}
